"""Final samplers that choose the token: greedy and the random draw."""

from __future__ import annotations

from typing import Any

import numpy as np

from muser.sampling.base import Sampler
from muser.sampling.candidates import Candidates
from muser.sampling.draw import pick_from_running, running_sums, uniform_double, unnormalized_probs
from muser.sampling.mt19937 import Mt19937, Mt19937State

__all__ = ["Greedy", "Distribution"]


def _require_finite_max(candidates: Candidates) -> None:
    if len(candidates) == 0:
        raise ValueError("no candidate tokens left to choose from")
    if not np.isfinite(candidates.logits.max()):
        raise ValueError("every candidate token has a -inf logit: nothing can be chosen")


class Greedy(Sampler):
    """Chooses the highest logit (the first one on ties). Draws no random number."""

    name = "greedy"
    selects = True

    def apply(self, candidates: Candidates) -> None:
        _require_finite_max(candidates)
        candidates.selected = int(np.argmax(candidates.logits))


class Distribution(Sampler):
    """Draws the token from softmax(logits) with its own :class:`Mt19937` stream.

    Reproduces llama.cpp's final ``dist`` step bit for bit: ``p_i = expf(l_i - max)``,
    a running sum in double in candidate order, one
    ``uniform_real_distribution<double>`` draw ``u`` (two 32-bit words), and the
    first candidate whose running sum reaches ``total * u``. A single candidate is
    chosen without drawing. Leaves normalized ``probs`` on the candidates.
    State: the RNG stream.
    Failure: ``ValueError`` if no candidate has a finite logit.
    """

    name = "dist"
    selects = True

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._rng = Mt19937(self.seed)

    def apply(self, candidates: Candidates) -> None:
        _require_finite_max(candidates)
        if len(candidates) == 1:
            candidates.probs = np.ones(1, dtype=np.float32)
            candidates.selected = 0
            return
        weights = unnormalized_probs(candidates.logits)
        running = running_sums(weights)
        candidates.selected = pick_from_running(running, uniform_double(self._rng))
        candidates.probs = (weights / running[-1]).astype(np.float32)

    def reset(self) -> None:
        self._rng.seed(self.seed)

    def clone(self) -> "Distribution":
        twin = Distribution(self.seed)
        twin.restore(self.snapshot())
        return twin

    def snapshot(self) -> Mt19937State:
        return self._rng.getstate()

    def restore(self, state: Any) -> None:
        if not isinstance(state, Mt19937State):
            raise ValueError(f"{self.name}: expected an Mt19937State, got {type(state).__name__}")
        self._rng.setstate(state)

    def _describe(self) -> dict[str, Any]:
        return {"seed": self.seed}
