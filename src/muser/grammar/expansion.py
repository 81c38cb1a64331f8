"""The expansion bound on nested repetitions, checked before a grammar is used.

A bounded repetition `x{m,n}` becomes a chain of `n` optional copies. When the
repeated item can itself end in (or start with) another repetition, e.g.
`("x"{0,2000}){0,2000}`, an ambiguous input keeps every combination of the two
chains' positions alive at once: the recognizer's states grow with the product
of the counts (4,000,000 here: minutes and gigabytes for 100 characters).

The *expansion* of a repetition is its count times the expansion its item
exposes at its boundaries. A boundary is exposed through nullable prefixes or
suffixes and through rule references; a non-nullable terminal at one side of
the item (a delimiter such as `"["` or `","`) makes where one copy ends and the
next begins unambiguous on that side, so only the smaller of the two sides
multiplies. A single repetition is always allowed (up to REPETITION_LIMIT);
an unbounded `*`/`+` exposes UNBOUNDED_EDGE. Every nested repetition's
expansion must stay within `muser.limits.MAX_REPETITION_EXPANSION`.

This is a sound-looking estimate, not an ambiguity proof: grammars that pass
it can still be ambiguous enough to need many recognizer items, which
`muser.limits.MAX_RECOGNIZER_ITEMS` bounds at run time.
"""

from __future__ import annotations

from collections import defaultdict

from muser import limits
from muser.errors import GrammarError
from muser.grammar.parser import (
    Alternatives,
    Node,
    ParsedGrammar,
    Repeat,
    RuleRef,
    Sequence,
)

# What an unbounded repetition exposes at its edges: `("x"*){0,n}` costs
# about as much as `("x"{0,100}){0,n}`.
UNBOUNDED_EDGE = 100

# (nullable, left edge expansion, right edge expansion) of a node or rule.
Edges = tuple[bool, int, int]


class _Evaluator:
    def __init__(self, parsed: ParsedGrammar, cap: int):
        self.cap = cap  # values saturate just above the limit so the fixpoint ends
        self.rules = {rule.name: rule for rule in parsed.rules}
        self.value: dict[str, Edges] = {name: (False, 1, 1) for name in self.rules}
        self.worst: tuple[int, str] = (0, "")  # (largest expansion seen, rule it is in)

    def clamp(self, n: int) -> int:
        return min(n, self.cap)

    def edges(self, node: Node, rule: str, refs: set[str]) -> Edges:
        if isinstance(node, RuleRef):
            refs.add(node.name)
            return self.value[node.name]
        if isinstance(node, Repeat):
            nullable, left, right = self.edges(node.item, rule, refs)
            nullable = nullable or node.min_count == 0
            if node.max_count is None:
                # `*`/`+` is one left-recursive nonterminal: it multiplies
                # nothing itself, but exposes an open-ended run to what
                # encloses it.
                return (nullable, max(left, UNBOUNDED_EDGE), max(right, UNBOUNDED_EDGE))
            count = node.max_count
            if count == 0:
                return (True, 1, 1)
            inner = min(left, right)
            if inner > 1:  # a repetition of something that exposes another one
                expansion = self.clamp(count * inner)
                if expansion > self.worst[0]:
                    self.worst = (expansion, rule)
            return (nullable, self.clamp(count * left), self.clamp(count * right))
        if isinstance(node, Sequence):
            parts = [self.edges(item, rule, refs) for item in node.items]
            left = right = 1
            for nullable, edge, _ in parts:
                left = max(left, edge)
                if not nullable:
                    break
            for nullable, _, edge in reversed(parts):
                right = max(right, edge)
                if not nullable:
                    break
            return (all(p[0] for p in parts), left, right)
        if isinstance(node, Alternatives):
            parts = [self.edges(option, rule, refs) for option in node.options]
            return (any(p[0] for p in parts), max(p[1] for p in parts), max(p[2] for p in parts))
        return (False, 1, 1)  # a character or token terminal


def check_expansion(parsed: ParsedGrammar) -> None:
    """Raise GrammarError if a repetition's expansion exceeds MAX_REPETITION_EXPANSION.

    Rule values are a fixpoint over the rules (iterative, with a worklist of the
    rules that refer to a changed one), so long chains of rule references
    cannot exhaust the stack; values only grow and saturate, so it ends.
    """
    limit = limits.MAX_REPETITION_EXPANSION
    ev = _Evaluator(parsed, cap=limit + 1)
    users: dict[str, set[str]] = defaultdict(set)
    pending = list(ev.rules)
    queued = set(pending)
    while pending:
        name = pending.pop()
        queued.discard(name)
        refs: set[str] = set()
        new = ev.edges(ev.rules[name].body, name, refs)
        for ref in refs:
            users[ref].add(name)
        if ev.worst[0] > limit:
            break
        old = ev.value[name]
        merged = (old[0] or new[0], max(old[1], new[1]), max(old[2], new[2]))
        if merged != old:
            ev.value[name] = merged
            for user in users[name]:
                if user not in queued:
                    queued.add(user)
                    pending.append(user)
    expansion, rule = ev.worst
    if expansion > limit:
        raise GrammarError(
            f"rule '{rule}': nested repetitions expand to more than muser.limits.MAX_REPETITION_EXPANSION = "
            f"{limit} combinations (the counts of repetitions nested inside each other multiply)"
        )
