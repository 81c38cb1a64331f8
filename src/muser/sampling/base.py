"""The sampler interface and the grammar hook.

A sampler is a small object with four verbs (llama.cpp's ``llama_sampler_i``):
``apply(candidates)`` transforms or selects, ``accept(token)`` records a token
that was chosen (or fed from the prompt), ``reset()`` forgets all history and
reseeds, ``clone()`` makes an independent copy in the same state. muser adds
``snapshot()`` / ``restore(state)``: an immutable value holding all mutable state
(RNG streams, mirostat's mu, penalty windows), so that restore-then-continue
equals never having stopped.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any, Protocol, runtime_checkable

import numpy as np

from muser.sampling.candidates import Candidates

__all__ = ["Sampler", "GrammarConstraint"]


class Sampler(ABC):
    """Base class of every sampler.

    Subclasses set ``name`` and implement ``apply``; a sampler that chooses the
    token (sets ``candidates.selected``) sets ``selects = True``. Stateless
    samplers inherit no-op ``accept``/``reset`` and a ``None`` snapshot.

    Thread safety: a sampler is owned by one request; not synchronized.
    """

    name: str = "sampler"
    selects: bool = False

    @abstractmethod
    def apply(self, candidates: Candidates) -> None:
        """Transform ``candidates`` in place (or select one of them)."""

    def accept(self, token: int) -> None:
        """Record ``token`` as the latest token of the sequence."""

    def reset(self) -> None:
        """Forget all history; RNG streams restart from their seed."""

    def clone(self) -> "Sampler":
        """An independent sampler in the same state."""
        return copy.deepcopy(self)

    def snapshot(self) -> Any:
        """An immutable value capturing all mutable state (None if stateless)."""
        return None

    def restore(self, state: Any) -> None:
        """Return to a state captured by ``snapshot`` of a sampler built alike.

        Raises ``ValueError`` if the state does not belong to this kind of sampler.
        """
        if state is not None:
            raise ValueError(f"{self.name}: unexpected snapshot {type(state).__name__}")

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self._describe().items())
        return f"{type(self).__name__}({params})"

    def _describe(self) -> dict[str, Any]:
        return {}


@runtime_checkable
class GrammarConstraint(Protocol):
    """The hook a grammar (``muser.grammar``) plugs into a :class:`SamplerChain`.

    The chain samples first and asks the grammar only about the chosen token;
    only on rejection does it ask for the full mask and sample again (what
    llama.cpp's common sampler does, because a full mask is expensive).

    - ``check(token_id) -> bool``: may this token come next?
    - ``apply(logits)``: mask in place: set the logit of every token the grammar
      forbids next to ``-inf``; ``logits`` is a writable float32 (n_vocab,) array.
    - ``accept(token_id)``: advance the grammar past the token that was chosen.

    End-of-generation tokens are the grammar's call too: it allows them only
    where the grammar may end.
    """

    def check(self, token_id: int) -> bool: ...

    def apply(self, logits: np.ndarray) -> None: ...

    def accept(self, token_id: int) -> None: ...
