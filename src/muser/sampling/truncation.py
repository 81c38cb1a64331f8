"""Samplers that cut the candidate set: top-k, top-p, min-p, typical, top-n-sigma.

Each follows llama.cpp's rule, including its float32 arithmetic and its
ordering (sorted or not) after the cut, because the final draw walks the
candidates in order.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from muser.sampling.base import Sampler
from muser.sampling.candidates import Candidates, top_positions

__all__ = ["TopK", "TopP", "MinP", "Typical", "TopNSigma"]


def _logf(x: float) -> np.float32:
    """float32 natural log, rounded once (like a C library's logf)."""
    value: np.float32 = np.float32(math.log(float(np.float32(x)))) if x > 0 else np.float32(-np.inf)
    return value


class TopK(Sampler):
    """Keeps the ``k`` highest logits, sorted descending. ``k <= 0`` disables."""

    name = "top-k"

    def __init__(self, k: int) -> None:
        self.k = int(k)

    def apply(self, candidates: Candidates) -> None:
        if self.k <= 0:
            return
        candidates.keep_top(min(self.k, len(candidates)))

    def _describe(self) -> dict[str, Any]:
        return {"k": self.k}


class TopP(Sampler):
    """Nucleus sampling: the smallest prefix (by descending probability) whose
    cumulative probability reaches ``p``, at least ``min_keep`` long. ``p >= 1`` disables.

    The result is sorted. On an unsorted full vocabulary only the top 256, then
    4096, ... candidates are sorted until the prefix is found (the answer is the
    same as a full sort).
    """

    name = "top-p"

    def __init__(self, p: float, min_keep: int = 0) -> None:
        self.p = np.float32(p)
        self.min_keep = int(min_keep)

    def apply(self, candidates: Candidates) -> None:
        if self.p >= 1.0:
            return
        probs = candidates.softmax(sort=False)
        n = len(candidates)
        if candidates.sorted:
            cut = self._cut(probs)
            candidates.truncate(cut if cut else n)
            return
        width = 256 if n > 1024 else n
        while True:
            positions = top_positions(candidates.logits, width)
            cut = self._cut(probs[positions])
            if cut or width >= n:
                candidates.take(positions[: cut or n], sorted=True)
                return
            width = min(width * 16, n)

    def _cut(self, probs_in_order: np.ndarray) -> int:
        """Length of the kept prefix, or 0 if the running sum never qualifies."""
        running = np.cumsum(probs_in_order, dtype=np.float32)  # sequential float, as llama.cpp
        ok = running >= self.p
        if self.min_keep > 1:
            ok[: self.min_keep - 1] = False
        hit = int(np.argmax(ok))
        return hit + 1 if ok[hit] else 0

    def _describe(self) -> dict[str, Any]:
        return {"p": float(self.p), "min_keep": self.min_keep}


class MinP(Sampler):
    """Keeps tokens whose probability is at least ``p`` times the top one's. ``p <= 0`` disables.

    On unsorted candidates the survivors keep their order (llama.cpp's fast
    path); if fewer than ``min_keep`` survive, or the input was sorted, the
    sorted rule keeps a prefix of the sorted candidates instead.
    """

    name = "min-p"

    def __init__(self, p: float, min_keep: int = 0) -> None:
        self.p = np.float32(p)
        self.min_keep = int(min_keep)

    def apply(self, candidates: Candidates) -> None:
        if self.p <= 0.0 or len(candidates) == 0:
            return
        log_p = _logf(float(self.p))
        if not candidates.sorted:
            min_logit = np.float32(candidates.logits.max() + log_p)
            keep = np.flatnonzero(candidates.logits >= min_logit)
            if keep.shape[0] > 0 and keep.shape[0] >= self.min_keep:
                if keep.shape[0] < len(candidates):
                    candidates.take(keep, sorted=False)
                return
        candidates.sort_descending()
        min_logit = np.float32(candidates.logits[0] + log_p)
        too_small = candidates.logits < min_logit
        too_small[: max(self.min_keep, 1)] = False  # the first token always stays
        cut = int(np.argmax(too_small))
        if too_small[cut]:
            candidates.truncate(cut)

    def _describe(self) -> dict[str, Any]:
        return {"p": float(self.p), "min_keep": self.min_keep}


class Typical(Sampler):
    """Locally typical sampling: keeps the tokens whose surprise is closest to the
    entropy until their cumulative probability exceeds ``p``. ``p >= 1`` disables.

    The survivors are ordered by closeness (unsorted; equally close tokens by
    position) and keep the probabilities of the full softmax. Deviation from
    llama.cpp: a zero probability counts 0 * log 0 = 0 in the entropy (llama.cpp
    would get NaN).
    """

    name = "typical"

    def __init__(self, p: float, min_keep: int = 0) -> None:
        self.p = np.float32(p)
        self.min_keep = int(min_keep)

    def apply(self, candidates: Candidates) -> None:
        if self.p >= 1.0:
            return
        probs = candidates.softmax(sort=False)
        with np.errstate(divide="ignore", invalid="ignore"):
            neg_log = -np.log(probs)
            entropy = np.float32(np.sum(np.where(probs > 0, probs * neg_log, 0.0), dtype=np.float32))
            closeness = -np.abs(neg_log - entropy)  # higher = more typical; -inf for p = 0
        n = len(candidates)
        width = 256 if n > 1024 else n
        while True:  # only the most typical tokens need ordering
            order = top_positions(closeness, width)
            running = np.cumsum(probs[order], dtype=np.float32)
            ok = running > self.p
            if self.min_keep > 1:
                ok[: self.min_keep - 1] = False
            hit = int(np.argmax(ok))
            if ok[hit] or width >= n:
                candidates.take(order[: hit + 1 if ok[hit] else n], sorted=False)
                return
            width = min(width * 16, n)

    def _describe(self) -> dict[str, Any]:
        return {"p": float(self.p), "min_keep": self.min_keep}


class TopNSigma(Sampler):
    """Keeps logits within ``n`` standard deviations of the maximum (the rest get -inf).

    Mean and deviation are over the finite logits. ``n <= 0`` disables. Order is
    unchanged.
    """

    name = "top-n-sigma"

    def __init__(self, n: float) -> None:
        self.n = np.float32(n)

    def apply(self, candidates: Candidates) -> None:
        if self.n <= 0.0 or len(candidates) <= 1:
            return
        logits = candidates.logits
        finite = logits[logits != -np.inf]
        if finite.shape[0] == 0:
            return
        top = np.float32(finite.max())
        mean = np.float32(np.sum(finite, dtype=np.float64) / finite.shape[0])
        deviation = np.float32(math.sqrt(float(np.sum((finite - mean).astype(np.float64) ** 2)) / finite.shape[0]))
        cutoff = np.float32(top - self.n * deviation)
        logits[logits < cutoff] = -np.inf
        candidates.probs = None

    def _describe(self) -> dict[str, Any]:
        return {"n": float(self.n)}
