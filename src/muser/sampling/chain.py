"""SamplerChain: samplers applied in order, ending with one that chooses the token."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from muser.errors import GrammarError
from muser.sampling.base import GrammarConstraint, Sampler
from muser.sampling.candidates import Candidates

__all__ = ["SamplerChain", "ChainSnapshot"]


@dataclass(frozen=True)
class ChainSnapshot:
    """All mutable sampler state of a chain: one entry per sampler, by position.

    Immutable and picklable. The grammar's state is not included: the grammar
    object snapshots itself.
    """

    names: tuple[str, ...]
    states: tuple[Any, ...]


class SamplerChain:
    """Applies ``samplers`` in order to the candidates of each step.

    The last sampler must choose the token (``selects``: greedy, dist or
    mirostat). An optional ``grammar`` (:class:`GrammarConstraint`) is consulted
    the way llama.cpp's common sampler does it: sample without the grammar,
    ask the grammar about the chosen token only, and if it is rejected, mask the
    full vocabulary and run the whole chain again (this second run advances the
    RNG streams and mirostat's mu once more, exactly as in llama.cpp).

    Usage per step: ``token = chain.sample(logits)``, then ``chain.accept(token)``.

    Thread safety: a chain belongs to one request; not synchronized. Chains
    share nothing, so requests running side by side do not affect each other's
    draws.
    """

    def __init__(
        self,
        samplers: Sequence[Sampler],
        *,
        grammar: GrammarConstraint | None = None,
        seed: int | None = None,
    ) -> None:
        self.samplers: tuple[Sampler, ...] = tuple(samplers)
        if not self.samplers:
            raise ValueError("a sampler chain needs at least one sampler")
        for sampler in self.samplers:
            if not isinstance(sampler, Sampler):
                raise TypeError(f"not a Sampler: {sampler!r}")
        if not self.samplers[-1].selects:
            raise ValueError(f"the last sampler must choose the token, got {self.samplers[-1].name!r}")
        if grammar is not None and not isinstance(grammar, GrammarConstraint):
            raise TypeError("grammar must provide check(token_id), apply(logits) and accept(token_id)")
        self.grammar = grammar
        #: The seed the factory used for the chain's RNG streams (informational).
        self.seed = seed
        #: Candidates of the last ``sample`` call, after the final sampler (probs set).
        self.last_candidates: Candidates | None = None

    # -- one step ------------------------------------------------------------

    def apply(self, candidates: Candidates) -> None:
        """Run every sampler on ``candidates`` (no grammar)."""
        for sampler in self.samplers:
            sampler.apply(candidates)
        if candidates.selected < 0:
            raise ValueError(f"the final sampler {self.samplers[-1].name!r} chose no token")

    def sample(self, logits: np.ndarray) -> int:
        """Choose the next token from next-token ``logits`` (float32 (n_vocab,), not modified).

        Does not record the token: call :meth:`accept` with the token you keep.
        Raises ``ValueError`` for malformed logits, ``GrammarError`` if the
        grammar allows no token at all.
        """
        candidates = Candidates.from_logits(logits)
        self.apply(candidates)
        token = candidates.selected_id
        if self.grammar is None or self.grammar.check(token):
            self.last_candidates = candidates
            return token
        masked = np.array(logits, dtype=np.float32, copy=True)
        self.grammar.apply(masked)
        if not bool(np.any(masked > -np.inf)):
            raise GrammarError("the grammar allows no token at this point")
        candidates = Candidates.from_logits(masked)
        self.apply(candidates)
        self.last_candidates = candidates
        return candidates.selected_id

    def accept(self, token: int, *, grammar: bool = True) -> None:
        """Record ``token`` as chosen: every sampler sees it, and the grammar too
        unless ``grammar=False``."""
        token = int(token)
        if grammar and self.grammar is not None:
            self.grammar.accept(token)
        for sampler in self.samplers:
            sampler.accept(token)

    def accept_prompt(self, tokens: Iterable[int]) -> None:
        """Feed prompt tokens to the samplers' history (penalty and DRY windows), not to the grammar."""
        for token in tokens:
            self.accept(token, grammar=False)

    # -- lifecycle -----------------------------------------------------------

    def reset(self) -> None:
        """Forget all history; every RNG stream restarts from its seed."""
        for sampler in self.samplers:
            sampler.reset()
        self.last_candidates = None

    def clone(self) -> "SamplerChain":
        """An independent chain in the same state (sharing the grammar object)."""
        return SamplerChain([s.clone() for s in self.samplers], grammar=self.grammar, seed=self.seed)

    def snapshot(self) -> ChainSnapshot:
        """Capture every sampler's state (RNG streams, mirostat mu, windows)."""
        return ChainSnapshot(
            names=tuple(s.name for s in self.samplers),
            states=tuple(s.snapshot() for s in self.samplers),
        )

    def restore(self, snapshot: ChainSnapshot) -> None:
        """Return to ``snapshot``; continuing then equals never having stopped.

        Raises ``ValueError`` (and changes nothing) if the snapshot was taken from
        a chain with a different sampler layout.
        """
        if not isinstance(snapshot, ChainSnapshot):
            raise TypeError(f"expected ChainSnapshot, got {type(snapshot).__name__}")
        names = tuple(s.name for s in self.samplers)
        if snapshot.names != names:
            raise ValueError(f"snapshot is of a chain {snapshot.names}, this chain is {names}")
        backup = self.snapshot()
        try:
            for sampler, state in zip(self.samplers, snapshot.states):
                sampler.restore(state)
        except (ValueError, TypeError) as error:
            for sampler, state in zip(self.samplers, backup.states):
                sampler.restore(state)
            raise ValueError(f"snapshot does not fit this chain: {error}") from error

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.samplers)

    def __repr__(self) -> str:
        return f"SamplerChain({' -> '.join(self.names)})"
