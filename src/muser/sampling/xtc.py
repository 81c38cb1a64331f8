"""XTC ("exclude top choices"): sometimes remove the most likely tokens."""

from __future__ import annotations

from typing import Any

import numpy as np

from muser.sampling.base import Sampler
from muser.sampling.candidates import Candidates
from muser.sampling.draw import uniform_float
from muser.sampling.mt19937 import Mt19937, Mt19937State

__all__ = ["Xtc"]


class Xtc(Sampler):
    """With chance ``probability`` per step, drops every token whose probability
    is at least ``threshold`` except the least likely of them.

    Disabled when ``probability <= 0``, ``threshold > 0.5`` or fewer than two
    candidates (then no random number is drawn). The chance is one
    ``uniform_real_distribution<float>`` draw from the sampler's own
    :class:`Mt19937` stream seeded with ``seed``. Survivors stay sorted and keep
    their (un-renormalized) probabilities.
    State: the RNG stream.
    """

    name = "xtc"

    def __init__(self, probability: float, threshold: float, min_keep: int, seed: int) -> None:
        self.probability = np.float32(probability)
        self.threshold = np.float32(threshold)
        self.min_keep = int(min_keep)
        self.seed = int(seed)
        self._rng = Mt19937(self.seed)

    def apply(self, candidates: Candidates) -> None:
        if self.probability <= 0.0 or self.threshold > 0.5 or len(candidates) < 2:
            return
        chance = np.float32(uniform_float(self._rng))
        if chance > self.probability:
            return
        probs = candidates.softmax(sort=True)
        above = probs >= self.threshold
        leading = len(above) if bool(above.all()) else int(np.argmin(above))
        last_above = max(leading - 1, 0)
        if len(candidates) - last_above >= self.min_keep and last_above > 0:
            candidates.drop_front(last_above)

    def reset(self) -> None:
        self._rng.seed(self.seed)

    def clone(self) -> "Xtc":
        twin = Xtc(float(self.probability), float(self.threshold), self.min_keep, self.seed)
        twin.restore(self.snapshot())
        return twin

    def snapshot(self) -> Mt19937State:
        return self._rng.getstate()

    def restore(self, state: Any) -> None:
        if not isinstance(state, Mt19937State):
            raise ValueError(f"{self.name}: expected an Mt19937State, got {type(state).__name__}")
        self._rng.setstate(state)

    def _describe(self) -> dict[str, Any]:
        return {
            "probability": float(self.probability),
            "threshold": float(self.threshold),
            "min_keep": self.min_keep,
            "seed": self.seed,
        }
