"""Test helper: random sentences of a grammar, by random derivation of its flat rules.

Independent of the recognizer: it only reads the productions. Past `max_depth`
it takes, for every nonterminal, the production with the shallowest derivation,
so every walk terminates.
"""

from __future__ import annotations

import random

from muser.grammar.flat_rules import CHAR, NONTERMINAL, FlatGrammar

_SURROGATES = (0xD800, 0xDFFF)


def _heights(flat: FlatGrammar) -> list[float]:
    """Smallest derivation height per nonterminal (inf if it derives nothing finite)."""
    inf = float("inf")
    height = [inf] * len(flat.names)
    changed = True
    while changed:
        changed = False
        for lhs, rhs in flat.productions:
            h = 1 + max((height[i] if k == NONTERMINAL else 0 for k, i in rhs), default=0)
            if h < height[lhs]:
                height[lhs] = h
                changed = True
    return height


def _random_code_point(ranges, rng: random.Random, ascii_bias: float) -> int:
    ascii_ranges = [(lo, min(hi, 0x7E)) for lo, hi in ranges if lo <= 0x7E and min(hi, 0x7E) >= max(lo, 0x20)]
    if ascii_ranges and rng.random() < ascii_bias:
        lo, hi = rng.choice(ascii_ranges)
        return rng.randint(max(lo, 0x20), hi)
    for _ in range(100):
        lo, hi = rng.choice(ranges)
        hi = min(hi, 0x2FFFF)  # keep to assigned planes, still exercising 4-byte UTF-8
        if lo > hi:
            continue
        cp = rng.randint(lo, hi)
        if not _SURROGATES[0] <= cp <= _SURROGATES[1]:
            return cp
    lo, _ = ranges[0]
    return lo


def random_sentence(flat: FlatGrammar, rng: random.Random, max_depth: int = 12, ascii_bias: float = 0.8) -> str:
    """One random sentence of `flat` (grammars without token terminals)."""
    heights = _heights(flat)
    by_lhs: dict[int, list[tuple]] = {}
    for lhs, rhs in flat.productions:
        by_lhs.setdefault(lhs, []).append(rhs)
    out: list[str] = []
    # explicit stack of (symbol, depth): deep grammars must not hit Python's recursion limit
    stack = [((NONTERMINAL, flat.start), 0)]
    while stack:
        (kind, idx), depth = stack.pop()
        if kind == CHAR:
            out.append(chr(_random_code_point(flat.charsets[idx].ranges, rng, ascii_bias)))
            continue
        if kind != NONTERMINAL:
            raise ValueError("random_sentence does not handle token terminals")
        options = by_lhs[idx]
        if depth >= max_depth:
            def cost(rhs):
                return max((heights[i] if k == NONTERMINAL else 0 for k, i in rhs), default=0)
            best = min(cost(r) for r in options)
            options = [r for r in options if cost(r) == best]
        rhs = rng.choice(options)
        for sym in reversed(rhs):
            stack.append((sym, depth + 1))
    return "".join(out)
