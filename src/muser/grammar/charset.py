"""Sets of Unicode code points, stored as sorted disjoint inclusive ranges.

A `CharSet` is the terminal of the flat grammar: a literal character, a
character class (`[a-z]`, `[^"\\\\]`), or `.` all become one. They are immutable and
hashable so equal classes intern to one terminal id.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterable

MAX_CODE_POINT = 0x10FFFF


class CharSet:
    """An immutable set of code points.

    `ranges` is a tuple of `(lo, hi)` inclusive pairs, sorted and non-adjacent.
    `ascii_bits` has bit `c` set for every ASCII code point `c` in the set, so the
    hot path (ASCII input) is one shift and one mask.
    """

    __slots__ = ("ranges", "ascii_bits", "_los", "_hash")

    def __init__(self, ranges: Iterable[tuple[int, int]]):
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(ranges):
            if lo > hi:
                continue
            if merged and lo <= merged[-1][1] + 1:
                if hi > merged[-1][1]:
                    merged[-1] = (merged[-1][0], hi)
            else:
                merged.append((lo, hi))
        self.ranges: tuple[tuple[int, int], ...] = tuple(merged)
        bits = 0
        for lo, hi in self.ranges:
            if lo > 0x7F:
                break
            top = min(hi, 0x7F)
            bits |= ((1 << (top - lo + 1)) - 1) << lo
        self.ascii_bits = bits
        self._los = [lo for lo, _ in self.ranges]
        self._hash = hash(self.ranges)

    @classmethod
    def single(cls, cp: int) -> "CharSet":
        return cls([(cp, cp)])

    @classmethod
    def any(cls) -> "CharSet":
        return cls([(0, MAX_CODE_POINT)])

    def negated(self) -> "CharSet":
        """Every code point not in this set (within 0..U+10FFFF)."""
        out = []
        nxt = 0
        for lo, hi in self.ranges:
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = hi + 1
        if nxt <= MAX_CODE_POINT:
            out.append((nxt, MAX_CODE_POINT))
        return CharSet(out)

    def union(self, other: "CharSet") -> "CharSet":
        return CharSet(self.ranges + other.ranges)

    def difference(self, other: "CharSet") -> "CharSet":
        return self.intersection(other.negated())

    def intersection(self, other: "CharSet") -> "CharSet":
        out = []
        i = j = 0
        a, b = self.ranges, other.ranges
        while i < len(a) and j < len(b):
            lo = max(a[i][0], b[j][0])
            hi = min(a[i][1], b[j][1])
            if lo <= hi:
                out.append((lo, hi))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return CharSet(out)

    def __contains__(self, cp: int) -> bool:
        if cp < 0x80:
            return bool((self.ascii_bits >> cp) & 1)
        k = bisect_right(self._los, cp) - 1
        return k >= 0 and cp <= self.ranges[k][1]

    def overlap(self, lo: int, hi: int) -> int:
        """How `[lo, hi]` meets this set: 0 none, 1 partly, 2 entirely inside."""
        k = bisect_right(self._los, hi) - 1
        # ranges[k] is the last range starting at or before hi
        if k < 0 or self.ranges[k][1] < lo:
            return 0
        rlo, rhi = self.ranges[k]
        if rlo <= lo and hi <= rhi:
            return 2
        return 1

    def is_empty(self) -> bool:
        return not self.ranges

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharSet) and self.ranges == other.ranges

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"CharSet({list(self.ranges)!r})"
