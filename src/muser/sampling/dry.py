"""DRY ("don't repeat yourself"): penalize tokens that would extend a repeat.

If the last tokens of the sequence also occur earlier, the token that followed
that earlier occurrence would continue the repetition; DRY lowers its logit by
``multiplier * base ** (length - allowed_length)`` once the repeated run is at
least ``allowed_length`` long. Sequence breakers (e.g. a newline) end the run:
the repeat may not reach back past the most recent breaker.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from typing import Any

import numpy as np

from muser.sampling.base import Sampler
from muser.sampling.candidates import Candidates

__all__ = ["Dry", "dry_breakers_from_strings", "reverse_z_lengths"]

# llama.cpp's limits for processing breaker strings.
MAX_BREAKER_CHARS = 40
MAX_BREAKER_TAIL_TOKENS = 20
# ln(FLT_MAX): keeps base ** exponent finite in float.
_FLOAT_MAX_LOG = np.float32(88.7228391)

Breakers = Mapping[int, Sequence[tuple[int, ...]]]


def reverse_z_lengths(tokens_newest_first: Sequence[int]) -> list[int]:
    """Z-array of the sequence read newest-first.

    ``z[k]`` is the length of the longest run ending ``k`` tokens before the
    newest token that equals the run ending at the newest token (``z[0] = 0``).
    Linear time (the classic Z-algorithm).
    """
    n = len(tokens_newest_first)
    z = [0] * n
    left = right = 0  # the rightmost match window [left, right)
    seq = tokens_newest_first
    for k in range(1, n):
        length = 0
        if k < right:
            length = min(right - k, z[k - left])
        while k + length < n and seq[length] == seq[k + length]:
            length += 1
        z[k] = length
        if k + length > right:
            left, right = k, k + length
    return z


def dry_breakers_from_strings(
    breakers: Iterable[str],
    token_pieces: Sequence[bytes],
    tokenize: Callable[[str], Sequence[int]],
) -> dict[int, list[tuple[int, ...]]]:
    """Turn breaker strings into token sequences (head token -> list of tails).

    A token whose text contains a breaker is a breaker by itself (empty tail). A
    token whose text ends with the start of a breaker is a head; its tail is the
    tokenization of the rest of the breaker (at most 20 tokens). Breakers are
    cut to 40 characters; empty ones are ignored. ``token_pieces`` are the bytes
    each token contributes (special tokens included); ``tokenize`` tokenizes
    plain text without special tokens. This is llama.cpp's processing, which
    scans the whole vocabulary: cache the result per vocabulary.
    """
    result: dict[int, list[tuple[int, ...]]] = {}
    for breaker in breakers:
        if not breaker:
            continue
        text = breaker[:MAX_BREAKER_CHARS]
        needle = text.encode("utf-8")
        for token, piece in enumerate(token_pieces):
            if needle in piece:
                tails = result.setdefault(token, [])
                if () not in tails:
                    tails.append(())
                continue
            start = piece.find(needle[:1])
            while start != -1:
                overlap = len(piece) - start
                if overlap < len(needle) and piece[start:] == needle[:overlap]:
                    rest = needle[overlap:].decode("utf-8", errors="ignore")
                    tail = tuple(int(t) for t in tokenize(rest))[:MAX_BREAKER_TAIL_TOKENS]
                    tails = result.setdefault(token, [])
                    if tail not in tails:
                        tails.append(tail)
                start = piece.find(needle[:1], start + 1)
    return result


class Dry(Sampler):
    """The DRY repetition penalty (llama.cpp's rule, originally from KoboldCpp).

    Args:
        multiplier: penalty scale; 0 disables.
        base: growth per extra repeated token; below 1 disables.
        allowed_length: repeats up to this long are free.
        penalty_last_n: how many recent tokens to scan; 0 disables, -1 all of
            ``context_size`` (or every accepted token if that is None).
        breakers: head token -> tails, e.g. from :func:`dry_breakers_from_strings`.
        context_size: the sequence's context limit (bounds the window), or None.

    State: the recent tokens (snapshot is their tuple).
    """

    name = "dry"

    def __init__(
        self,
        multiplier: float,
        base: float,
        allowed_length: int,
        penalty_last_n: int,
        breakers: Breakers | None = None,
        context_size: int | None = None,
    ) -> None:
        if penalty_last_n < -1:
            raise ValueError(f"dry_penalty_last_n must be >= -1, got {penalty_last_n}")
        self.multiplier = np.float32(multiplier)
        self.base = np.float32(base)
        self.allowed_length = int(allowed_length)
        self.penalty_last_n = int(penalty_last_n)
        self.context_size = context_size
        self.breakers: dict[int, tuple[tuple[int, ...], ...]] = {
            int(head): tuple(tuple(int(t) for t in tail) for tail in tails) for head, tails in (breakers or {}).items()
        }
        window = self._window_size()
        self._recent: deque[int] = deque(maxlen=window if self.enabled else 0)

    @property
    def enabled(self) -> bool:
        return bool(self.multiplier != 0.0 and self.base >= 1.0 and self.penalty_last_n != 0)

    def _window_size(self) -> int | None:
        if self.penalty_last_n == -1:
            return self.context_size
        return self.penalty_last_n

    def accept(self, token: int) -> None:
        if self.enabled:
            self._recent.append(int(token))

    def apply(self, candidates: Candidates) -> None:
        if not self.enabled:
            return
        window = self._window_size()
        length = len(self._recent) if window is None else min(len(self._recent), window)
        if self.context_size is not None:
            length = min(length, self.context_size)
        if length <= self.allowed_length:
            return
        newest_first = list(islice(reversed(self._recent), length))
        limit = self._repeat_limit(newest_first)
        if limit < self.allowed_length:
            return
        longest_after = self._longest_repeats(newest_first, limit)
        if longest_after:
            self._penalize(candidates, longest_after)
        candidates.logits_changed()

    def _repeat_limit(self, newest_first: list[int]) -> int:
        """How far back a repeat may reach: up to the most recent complete breaker."""
        for distance, token in enumerate(newest_first):
            tails = self.breakers.get(token)
            if not tails:
                continue
            longest = -1
            for tail in tails:
                if longest < len(tail) <= distance and all(
                    tail[offset] == newest_first[distance - offset - 1] for offset in range(len(tail))
                ):
                    longest = len(tail)
            if longest >= 0:
                return distance - longest
        return len(newest_first)

    def _longest_repeats(self, newest_first: list[int], limit: int) -> dict[int, int]:
        """For each token that would continue a repeat: the longest such repeat."""
        z = reverse_z_lengths(newest_first)
        longest: dict[int, int] = {}
        for k in range(1, len(newest_first)):
            run = min(z[k], limit)
            if run >= self.allowed_length:
                follower = newest_first[k - 1]  # the token after the earlier occurrence
                if longest.get(follower, -1) < run:
                    longest[follower] = run
        return longest

    def _penalize(self, candidates: Candidates, longest_after: dict[int, int]) -> None:
        max_exponent = 0
        if self.base > np.float32(1.000001):
            max_exponent = int(_FLOAT_MAX_LOG / np.float32(np.log(self.base)))
        tokens = np.fromiter(longest_after.keys(), dtype=np.int64, count=len(longest_after))
        positions, which = candidates.positions_of(tokens)
        runs = list(longest_after.values())
        for position, index in zip(positions.tolist(), which.tolist()):
            token = int(tokens[index])
            if () in self.breakers.get(token, ()):
                continue  # a single-token breaker is never penalized
            exponent = runs[index] - self.allowed_length
            if max_exponent > 0 and exponent > max_exponent:
                exponent = max_exponent
            # C++ promotes pow(float, int) to double; the subtraction rounds once to float.
            penalty = float(self.multiplier) * float(self.base) ** exponent
            candidates.logits[position] = np.float32(float(candidates.logits[position]) - penalty)

    def reset(self) -> None:
        self._recent.clear()

    def clone(self) -> "Dry":
        twin = Dry(
            float(self.multiplier),
            float(self.base),
            self.allowed_length,
            self.penalty_last_n,
            self.breakers,
            self.context_size,
        )
        twin.restore(self.snapshot())
        return twin

    def snapshot(self) -> tuple[int, ...]:
        return tuple(self._recent)

    def restore(self, state: Any) -> None:
        if not isinstance(state, tuple):
            raise ValueError(f"{self.name}: expected a tuple of tokens, got {type(state).__name__}")
        self._recent.clear()
        self._recent.extend(int(t) for t in state)

    def _describe(self) -> dict[str, Any]:
        return {
            "multiplier": float(self.multiplier),
            "base": float(self.base),
            "allowed_length": self.allowed_length,
            "penalty_last_n": self.penalty_last_n,
            "breakers": len(self.breakers),
        }
