"""Logit bias: add a fixed amount to chosen tokens' logits (``-inf`` bans a token)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from muser.sampling.base import Sampler
from muser.sampling.candidates import Candidates

__all__ = ["LogitBias"]


class LogitBias(Sampler):
    """Adds ``biases[token]`` to the logit of each listed token present.

    Token ids beyond the vocabulary never match (llama.cpp ignores them too).
    Raises ``ValueError`` for a negative id or a NaN/+inf bias.
    """

    name = "logit-bias"

    def __init__(self, biases: Mapping[int, float]) -> None:
        items = sorted((int(token), float(bias)) for token, bias in biases.items())
        for token, bias in items:
            if token < 0:
                raise ValueError(f"logit_bias: token id must be >= 0, got {token}")
            if math.isnan(bias) or bias == math.inf:
                raise ValueError(f"logit_bias: bias of token {token} must be finite or -inf, got {bias}")
        self._tokens = np.array([token for token, _ in items], dtype=np.int64)
        self._biases = np.array([bias for _, bias in items], dtype=np.float32)

    def apply(self, candidates: Candidates) -> None:
        if self._tokens.shape[0] == 0:
            return
        positions, which = candidates.positions_of(self._tokens)
        if positions.shape[0] == 0:
            return
        candidates.logits[positions] += self._biases[which]
        candidates.logits_changed()

    def _describe(self) -> dict[str, Any]:
        return {"biases": dict(zip(self._tokens.tolist(), self._biases.tolist()))}
