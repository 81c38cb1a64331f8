"""Temperature, with optional dynamic (entropy-based) temperature."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from muser.sampling.base import Sampler
from muser.sampling.candidates import Candidates

__all__ = ["Temperature", "scale_by_temperature"]


def scale_by_temperature(candidates: Candidates, temperature: np.float32) -> None:
    """Divide logits by ``temperature``; at ``<= 0`` keep only the first maximum (others -inf)."""
    logits = candidates.logits
    if temperature <= 0.0:
        best = int(np.argmax(logits))
        kept = logits[best]
        logits[:] = -np.inf
        logits[best] = kept
    else:
        logits /= temperature
    candidates.probs = None


class Temperature(Sampler):
    """Scales logits by 1/temperature (llama.cpp's ``temp`` and ``temp-ext``).

    With ``dynatemp_range > 0`` the temperature is chosen per step from
    ``[max(0, t - range), t + range]`` by the normalized entropy of the
    distribution raised to ``dynatemp_exponent``; this path sorts the candidates.
    A temperature ``<= 0`` keeps only the most likely token.
    """

    name = "temp-ext"

    def __init__(self, temperature: float, dynatemp_range: float = 0.0, dynatemp_exponent: float = 1.0) -> None:
        self.temperature = np.float32(temperature)
        self.dynatemp_range = np.float32(dynatemp_range)
        self.dynatemp_exponent = np.float32(dynatemp_exponent)

    def apply(self, candidates: Candidates) -> None:
        if self.dynatemp_range > 0.0:
            self._apply_dynamic(candidates)
        else:
            scale_by_temperature(candidates, self.temperature)

    def _apply_dynamic(self, candidates: Candidates) -> None:
        min_temp = max(np.float32(0.0), np.float32(self.temperature - self.dynatemp_range))
        max_temp = np.float32(self.temperature + self.dynatemp_range)
        size = len(candidates)
        if size <= 1:
            return
        max_entropy = np.float32(-math.log(float(np.float32(1.0) / np.float32(size))))
        probs = candidates.softmax(sort=True)
        positive = probs[probs > 0]
        entropy = np.float32(-np.sum(positive * np.log(positive), dtype=np.float32))
        normalized = np.float32(entropy / max_entropy)
        dynamic = np.float32(min_temp + (max_temp - min_temp) * np.float32(normalized ** self.dynatemp_exponent))
        scale_by_temperature(candidates, dynamic)
        candidates.softmax(sort=False)  # still sorted: scaling keeps the order

    def _describe(self) -> dict[str, Any]:
        return {
            "temperature": float(self.temperature),
            "dynatemp_range": float(self.dynatemp_range),
            "dynatemp_exponent": float(self.dynatemp_exponent),
        }
