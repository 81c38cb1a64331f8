"""Repetition, frequency and presence penalties over the last N accepted tokens."""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

import numpy as np

from muser.sampling.base import Sampler
from muser.sampling.candidates import Candidates

__all__ = ["Penalties"]


class Penalties(Sampler):
    """Penalizes tokens that occur in the window of the last ``last_n`` accepted tokens.

    For a token seen ``count`` times in the window: a positive logit is divided
    by ``repeat``, a non-positive one multiplied by it (so the token always
    becomes less likely), then ``count * frequency + presence`` is subtracted
    (llama.cpp's rule, in float32).

    ``last_n``: window size; 0 disables; -1 keeps every accepted token.
    State: the window (snapshot is the tuple of its tokens).
    """

    name = "penalties"

    def __init__(self, last_n: int, repeat: float, frequency: float, presence: float) -> None:
        if last_n < -1:
            raise ValueError(f"penalty_last_n must be >= -1, got {last_n}")
        self.last_n = int(last_n)
        self.repeat = np.float32(repeat)
        self.frequency = np.float32(frequency)
        self.presence = np.float32(presence)
        self._window: deque[int] = deque(maxlen=None if last_n == -1 else last_n)
        self._counts: Counter[int] = Counter()

    @property
    def active(self) -> bool:
        return self.last_n != 0 and not (self.repeat == 1.0 and self.frequency == 0.0 and self.presence == 0.0)

    def accept(self, token: int) -> None:
        if self.last_n == 0:
            return
        if self._window.maxlen is not None and len(self._window) == self._window.maxlen:
            oldest = self._window[0]
            self._counts[oldest] -= 1
            if self._counts[oldest] == 0:
                del self._counts[oldest]
        self._window.append(int(token))
        self._counts[int(token)] += 1

    def apply(self, candidates: Candidates) -> None:
        if not self.active:
            return
        if self._counts:
            tokens = np.fromiter(self._counts.keys(), dtype=np.int64, count=len(self._counts))
            counts = np.fromiter(self._counts.values(), dtype=np.float32, count=len(self._counts))
            positions, which = candidates.positions_of(tokens)
            logits = candidates.logits[positions]
            logits = np.where(logits <= 0, logits * self.repeat, logits / self.repeat)
            logits -= counts[which] * self.frequency + self.presence
            candidates.logits[positions] = logits
        # llama.cpp marks the array unsorted whenever this sampler is active.
        candidates.logits_changed()

    def reset(self) -> None:
        self._window.clear()
        self._counts.clear()

    def clone(self) -> "Penalties":
        twin = Penalties(self.last_n, float(self.repeat), float(self.frequency), float(self.presence))
        twin.restore(self.snapshot())
        return twin

    def snapshot(self) -> tuple[int, ...]:
        return tuple(self._window)

    def restore(self, state: Any) -> None:
        if not isinstance(state, tuple):
            raise ValueError(f"{self.name}: expected a tuple of tokens, got {type(state).__name__}")
        self.reset()
        for token in state:
            self.accept(token)

    @property
    def window(self) -> tuple[int, ...]:
        """The tokens currently in the window, oldest first."""
        return tuple(self._window)

    def _describe(self) -> dict[str, Any]:
        return {
            "last_n": self.last_n,
            "repeat": float(self.repeat),
            "frequency": float(self.frequency),
            "presence": float(self.presence),
        }
