"""Mirostat v1 and v2: keep the observed surprise near a target ``tau``.

Both choose the token themselves (from their own :class:`Mt19937` stream, via
``std::discrete_distribution``) and update ``mu`` after each choice, in float32
like llama.cpp.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from muser.sampling.base import Sampler
from muser.sampling.candidates import Candidates, top_positions
from muser.sampling.draw import discrete_draw, unnormalized_probs
from muser.sampling.mt19937 import Mt19937, Mt19937State

__all__ = ["Mirostat", "MirostatV2"]

_INT32_MIN = -(2**31)


def _c_int(value: np.float32) -> int:
    """C++ ``int(float)`` as x86-64 computes it (NaN and out-of-range give INT_MIN)."""
    if not math.isfinite(value) or not -(2.0**31) <= float(value) < 2.0**31:
        return _INT32_MIN
    return int(value)


def _faithful_softmax(candidates: Candidates) -> np.ndarray:
    """Sort, then p = expf(l - max) / (float sum), as float32: the weights the draw sees."""
    candidates.sort_descending()
    weights = unnormalized_probs(candidates.logits)
    total = np.cumsum(weights, dtype=np.float32)[-1]  # float running sum, as in C++
    candidates.probs = weights / total
    return candidates.probs


class _MirostatBase(Sampler):
    selects = True

    def __init__(self, tau: float, eta: float, seed: int) -> None:
        self.tau = np.float32(tau)
        self.eta = np.float32(eta)
        self.seed = int(seed)
        self.mu = np.float32(2.0) * self.tau
        self._rng = Mt19937(self.seed)

    def _choose(self, candidates: Candidates) -> None:
        probs = _faithful_softmax(candidates)
        index = discrete_draw(probs, self._rng)
        candidates.selected = index
        surprise = np.float32(-np.log2(probs[index]))
        self.mu = np.float32(self.mu - self.eta * np.float32(surprise - self.tau))

    def reset(self) -> None:
        self.mu = np.float32(2.0) * self.tau
        self._rng.seed(self.seed)

    def snapshot(self) -> tuple[float, Mt19937State]:
        return (float(self.mu), self._rng.getstate())

    def restore(self, state: Any) -> None:
        if not (isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], Mt19937State)):
            raise ValueError(f"{self.name}: expected (mu, Mt19937State), got {state!r:.80}")
        self.mu = np.float32(state[0])
        self._rng.setstate(state[1])


class Mirostat(_MirostatBase):
    """Mirostat v1: estimates the Zipf exponent from the top ``m`` tokens, derives a
    top-k from ``mu``, and draws from it.

    ``n_vocab`` enters the formula; None means the size of the vocabulary the step
    started from. State: mu and the RNG stream.
    """

    name = "mirostat"

    def __init__(self, tau: float, eta: float, seed: int, m: int = 100, n_vocab: int | None = None) -> None:
        super().__init__(tau, eta, seed)
        self.m = int(m)
        self.n_vocab = n_vocab

    def apply(self, candidates: Candidates) -> None:
        probs = candidates.softmax(sort=False)
        count = max(min(self.m - 1, len(candidates) - 1), 0)
        top = probs[top_positions(candidates.logits, count + 1)]  # the most probable, sorted
        steps = np.arange(count, dtype=np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.log((steps + np.float32(2.0)) / (steps + np.float32(1.0)))
            b = np.log(top[:count] / top[1 : count + 1])
            sum_tb = np.cumsum(t * b, dtype=np.float32)[-1] if count else np.float32(0.0)
            sum_tt = np.cumsum(t * t, dtype=np.float32)[-1] if count else np.float32(0.0)
            s_hat = np.float32(sum_tb / sum_tt)
            epsilon = np.float32(s_hat - np.float32(1.0))
            n_vocab = np.float32(self.n_vocab if self.n_vocab is not None else candidates.n_vocab)
            k = np.float32(
                np.float32(
                    (epsilon * np.float32(2.0) ** self.mu) / (np.float32(1.0) - n_vocab ** (-epsilon))
                )
                ** (np.float32(1.0) / s_hat)
            )
        candidates.keep_top(min(max(_c_int(k), 1), len(candidates)))
        self._choose(candidates)

    def clone(self) -> "Mirostat":
        twin = Mirostat(float(self.tau), float(self.eta), self.seed, self.m, self.n_vocab)
        twin.restore(self.snapshot())
        return twin

    def _describe(self) -> dict[str, Any]:
        return {"tau": float(self.tau), "eta": float(self.eta), "seed": self.seed, "m": self.m}


class MirostatV2(_MirostatBase):
    """Mirostat v2: keeps the tokens whose surprise (-log2 p) is at most ``mu``
    (at least one), then draws from them. State: mu and the RNG stream."""

    name = "mirostat-v2"

    def apply(self, candidates: Candidates) -> None:
        probs = candidates.softmax(sort=False)
        with np.errstate(divide="ignore"):
            plausible = int(np.count_nonzero(-np.log2(probs) <= self.mu))
        # Surprise grows as the logit falls, so the plausible tokens are the top ones.
        candidates.keep_top(max(plausible, 1))
        self._choose(candidates)

    def clone(self) -> "MirostatV2":
        twin = MirostatV2(float(self.tau), float(self.eta), self.seed)
        twin.restore(self.snapshot())
        return twin

    def _describe(self) -> dict[str, Any]:
        return {"tau": float(self.tau), "eta": float(self.eta), "seed": self.seed}
