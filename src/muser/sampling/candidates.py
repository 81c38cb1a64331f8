"""The candidate set a sampler chain works on (llama.cpp's token-data array).

A :class:`Candidates` holds, for one sampling step, the surviving token ids, their
logits (float32, modified in place by penalties and temperature), optionally their
probabilities, whether they are sorted by descending logit, and the index of the
selected candidate once a final sampler has chosen one. It starts as the whole
vocabulary in id order.

Ordering matters: the final draw walks the candidates in array order, so every
operation keeps llama.cpp's order. Where llama.cpp's order is unspecified (equal
logits inside ``std::sort``/``std::partial_sort``), muser orders ties by their
current position, which makes every result deterministic.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["Candidates", "top_positions"]

# Above this size, top_positions first guesses a threshold from a strided sample.
_SAMPLED_TOP_MIN_SIZE = 16384
_SAMPLE_STRIDE = 16


def _sorted_desc(logits: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``positions`` ordered by descending logit, ties by ascending position."""
    order = np.argsort(-logits[positions], kind="stable")
    return positions[order]


def _with_ties(logits: np.ndarray, greater: np.ndarray, kth: np.float32, k: int) -> np.ndarray:
    """The top ``k``: every position above ``kth`` (sorted), then the first ties of ``kth``."""
    ties = np.flatnonzero(logits == kth)[: k - greater.shape[0]]
    return np.concatenate([_sorted_desc(logits, greater), ties])


def top_positions(logits: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest logits, by descending logit (ties: lower position first).

    Exact for any input. On large arrays a threshold is first estimated from a
    strided sample (cheap), every logit at or above it is collected, and only
    those are sorted. Otherwise, or if the estimate fails, an exact partition
    is used. Masked (-inf) logits are set aside first: a partition over a few
    values amid masses of ties is pathologically slow.
    """
    n = logits.shape[0]
    if k >= n:
        return _sorted_desc(logits, np.arange(n))
    if k <= 0:
        return np.empty(0, dtype=np.intp)
    finite = logits > -np.inf
    n_finite = int(np.count_nonzero(finite))
    if n_finite < n:  # masked logits: select among the finite ones, pad with -inf by position
        kept = np.flatnonzero(finite)
        if n_finite <= k:
            return np.concatenate([_sorted_desc(logits, kept), np.flatnonzero(~finite)[: k - n_finite]])
        chosen: np.ndarray = kept[top_positions(logits[kept], k)]
        return chosen
    bound = 64 * k + 4096
    if n >= _SAMPLED_TOP_MIN_SIZE and k * _SAMPLE_STRIDE * 4 <= n:
        sample = logits[::_SAMPLE_STRIDE]
        # Aim for ~1.5 k survivors; if the tail of the sample misleads, try once lower.
        for rank in (3 * k // (2 * _SAMPLE_STRIDE) + 8, 6 * k // _SAMPLE_STRIDE + 32):
            rank = min(rank, sample.shape[0])
            threshold = np.partition(sample, sample.shape[0] - rank)[sample.shape[0] - rank]
            above = np.flatnonzero(logits >= threshold)
            if above.shape[0] < k:
                continue  # the threshold is above the k-th largest value
            if above.shape[0] <= bound:
                return _sorted_desc(logits, above)[:k]
            greater = np.flatnonzero(logits > threshold)
            if greater.shape[0] < k:  # the k-th largest value is the threshold itself
                return _with_ties(logits, greater, threshold, k)
            if greater.shape[0] <= bound:
                return _sorted_desc(logits, greater)[:k]
            break
    kth = np.partition(logits, n - k)[n - k]  # the k-th largest value
    return _with_ties(logits, np.flatnonzero(logits > kth), kth, k)


class Candidates:
    """Token candidates for one sampling step.

    Attributes:
        ids: int32 (n,) token ids, or the identity ``0..n_vocab-1`` (materialized lazily).
        logits: float32 (n,), owned by this object (samplers modify it in place).
        probs: float32 (n,) probabilities from the last softmax, or None when stale.
        sorted: True when ``logits`` are in descending order.
        selected: index into the arrays of the chosen candidate, -1 before a choice.
        n_vocab: size of the vocabulary the step started from.

    Thread safety: mutable; one step, one thread.
    """

    __slots__ = ("_ids", "logits", "probs", "sorted", "selected", "n_vocab")

    def __init__(
        self,
        ids: np.ndarray | None,
        logits: np.ndarray,
        probs: np.ndarray | None = None,
        *,
        sorted: bool = False,
        n_vocab: int | None = None,
    ) -> None:
        self._ids = ids
        self.logits = logits
        self.probs = probs
        self.sorted = sorted
        self.selected = -1
        self.n_vocab = int(n_vocab if n_vocab is not None else logits.shape[0])

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> "Candidates":
        """The whole vocabulary in id order, from next-token logits of shape (n_vocab,).

        The logits are copied as float32. Raises ``ValueError`` for an empty or
        non-1-D array, or for NaN or +inf logits (-inf means "banned" and is fine).
        """
        values = np.array(logits, dtype=np.float32, copy=True)
        if values.ndim != 1 or values.shape[0] == 0:
            raise ValueError(f"logits must be a non-empty 1-D array, got shape {values.shape}")
        if not bool(np.all(values < np.inf)):  # false for NaN and +inf
            raise ValueError("logits contain NaN or +inf")
        return cls(None, values, sorted=False)

    @classmethod
    def from_arrays(
        cls,
        ids: ArrayLike,
        logits: ArrayLike,
        probs: ArrayLike | None = None,
        *,
        sorted: bool = False,
    ) -> "Candidates":
        """Candidates with explicit ids/logits[/probs] (copied), e.g. for tests."""
        ids_array = np.array(ids, dtype=np.int32, copy=True)
        logits_array = np.array(logits, dtype=np.float32, copy=True)
        if ids_array.shape != logits_array.shape or ids_array.ndim != 1:
            raise ValueError("ids and logits must be 1-D arrays of the same length")
        probs_array = None if probs is None else np.array(probs, dtype=np.float32, copy=True)
        if probs_array is not None and probs_array.shape != logits_array.shape:
            raise ValueError("probs must have the same length as logits")
        return cls(ids_array, logits_array, probs_array, sorted=sorted)

    # -- views ---------------------------------------------------------------

    @property
    def ids(self) -> np.ndarray:
        """int32 (n,) token ids in candidate order."""
        if self._ids is None:
            self._ids = np.arange(self.logits.shape[0], dtype=np.int32)
        return self._ids

    @property
    def is_identity(self) -> bool:
        """True while the candidates are still the whole vocabulary in id order."""
        return self._ids is None

    def __len__(self) -> int:
        return int(self.logits.shape[0])

    def positions_of(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where distinct ``tokens`` sit among the candidates.

        Returns ``(positions, which)``: candidate positions holding one of the
        tokens, and for each the index into ``tokens``. Absent tokens are skipped.
        """
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.shape[0] == 0:
            empty = np.empty(0, dtype=np.intp)
            return empty, empty
        if self._ids is None:  # position == id
            which = np.flatnonzero((tokens >= 0) & (tokens < self.logits.shape[0]))
            return tokens[which].astype(np.intp), which
        order = np.argsort(tokens, kind="stable")
        sorted_tokens = tokens[order]
        slot = np.minimum(np.searchsorted(sorted_tokens, self._ids), tokens.shape[0] - 1)
        positions = np.flatnonzero(sorted_tokens[slot] == self._ids)
        return positions, order[slot[positions]]

    @property
    def selected_id(self) -> int:
        """Token id of the selected candidate. Raises ``ValueError`` before a choice."""
        if self.selected < 0:
            raise ValueError("no candidate has been selected")
        return int(self.ids[self.selected])

    # -- reshaping -----------------------------------------------------------

    def take(self, positions: np.ndarray, *, sorted: bool) -> None:
        """Keep only the candidates at ``positions``, in that order (probs travel along)."""
        positions = np.asarray(positions, dtype=np.intp)
        self._ids = positions.astype(np.int32) if self._ids is None else self._ids[positions]
        self.logits = self.logits[positions]
        if self.probs is not None:
            self.probs = self.probs[positions]
        self.sorted = sorted
        self.selected = -1

    def truncate(self, size: int) -> None:
        """Keep the first ``size`` candidates (order and sortedness unchanged)."""
        if size >= len(self):
            return
        self._ids = self.ids[:size]
        self.logits = self.logits[:size]
        if self.probs is not None:
            self.probs = self.probs[:size]

    def drop_front(self, count: int) -> None:
        """Remove the first ``count`` candidates."""
        self._ids = self.ids[count:]
        self.logits = self.logits[count:]
        if self.probs is not None:
            self.probs = self.probs[count:]

    def sort_descending(self) -> None:
        """Sort by descending logit (ties keep their current order)."""
        if not self.sorted:
            self.take(_sorted_desc(self.logits, np.arange(len(self))), sorted=True)

    def keep_top(self, k: int) -> None:
        """Keep the ``k`` highest logits, sorted descending (llama.cpp's top-k core)."""
        if self.sorted:
            self.truncate(k)
        else:
            self.take(top_positions(self.logits, k), sorted=True)

    def logits_changed(self) -> None:
        """Record that logits were modified: order and probabilities are stale."""
        self.sorted = False
        self.probs = None

    def softmax(self, *, sort: bool) -> np.ndarray:
        """Set and return ``probs`` = softmax(logits) (float32), optionally sorting first."""
        if sort:
            self.sort_descending()
        max_logit = self.logits[0] if self.sorted else self.logits.max()
        exp = np.exp(self.logits - max_logit)
        self.probs = exp / np.float32(np.sum(exp, dtype=np.float64))
        return self.probs

    def copy(self) -> "Candidates":
        twin = Candidates(
            None if self._ids is None else self._ids.copy(),
            self.logits.copy(),
            None if self.probs is None else self.probs.copy(),
            sorted=self.sorted,
            n_vocab=self.n_vocab,
        )
        twin.selected = self.selected
        return twin

    def __repr__(self) -> str:
        return f"Candidates(n={len(self)}, sorted={self.sorted}, selected={self.selected})"
