"""Syntax tree -> flat context-free rules (plain BNF) for the recognizer.

Every group, alternation and repetition becomes a synthetic nonterminal, so a
production's right-hand side is a plain tuple of symbols. Symbols are
`(NONTERMINAL, index)`, `(CHAR, index into charsets)` or `(TOKEN, index into
token_terminals)`.

Unbounded repetition is made left-recursive (`S ::= ε | S x`): an Earley
recognizer keeps a constant number of items per input position for left
recursion, whereas right recursion grows one completion chain per position.
Bounded repetition `x{m,n}` is `m` copies followed by a nested optional chain of
`n - m`, like llama.cpp.

Nonterminal 0 is the synthetic start symbol `START ::= root`.
"""

from __future__ import annotations

from dataclasses import dataclass

from muser.grammar.charset import CharSet
from muser.grammar.parser import (
    Alternatives,
    Chars,
    Node,
    ParsedGrammar,
    Repeat,
    RuleRef,
    Sequence,
    Token,
)

NONTERMINAL = 0
CHAR = 1
TOKEN = 2

Symbol = tuple[int, int]


@dataclass(frozen=True)
class TokenTerminal:
    """`<[id]>` / `<text>`, negated or not; `text` is resolved per vocabulary."""

    token_id: int | None
    text: str | None
    negated: bool


@dataclass(frozen=True)
class FlatGrammar:
    """Plain BNF: productions over interned terminals.

    `productions[i] = (lhs, rhs)`; `names[n]` is a readable name for nonterminal
    `n` (synthetic ones look like `value/group2`). Immutable.
    """

    names: tuple[str, ...]
    productions: tuple[tuple[int, tuple[Symbol, ...]], ...]
    charsets: tuple[CharSet, ...]
    token_terminals: tuple[TokenTerminal, ...]

    @property
    def start(self) -> int:
        return 0


class _Flattener:
    def __init__(self, parsed: ParsedGrammar):
        self.names: list[str] = ["START"]
        self.productions: list[tuple[int, tuple[Symbol, ...]]] = []
        self.charsets: list[CharSet] = []
        self.charset_ids: dict[CharSet, int] = {}
        self.tokens: list[TokenTerminal] = []
        self.token_ids: dict[TokenTerminal, int] = {}
        self.rule_ids: dict[str, int] = {}
        self.synthetic_count: dict[str, int] = {}
        for rule in parsed.rules:
            self.rule_ids[rule.name] = self.new_nonterminal(rule.name)
        self.productions.append((0, ((NONTERMINAL, self.rule_ids[parsed.root]),)))
        for rule in parsed.rules:
            self.add_alternatives(self.rule_ids[rule.name], rule.body, rule.name)

    def new_nonterminal(self, name: str) -> int:
        self.names.append(name)
        return len(self.names) - 1

    def synthetic(self, owner: str, kind: str) -> int:
        k = self.synthetic_count.get(owner, 0) + 1
        self.synthetic_count[owner] = k
        return self.new_nonterminal(f"{owner}/{kind}{k}")

    def charset_symbol(self, charset: CharSet) -> Symbol:
        idx = self.charset_ids.get(charset)
        if idx is None:
            idx = len(self.charsets)
            self.charsets.append(charset)
            self.charset_ids[charset] = idx
        return (CHAR, idx)

    def token_symbol(self, token: Token) -> Symbol:
        term = TokenTerminal(token.token_id, token.text, token.negated)
        idx = self.token_ids.get(term)
        if idx is None:
            idx = len(self.tokens)
            self.tokens.append(term)
            self.token_ids[term] = idx
        return (TOKEN, idx)

    def add_alternatives(self, lhs: int, body: Alternatives, owner: str) -> None:
        for option in body.options:
            self.productions.append((lhs, tuple(self.sequence_symbols(option, owner))))

    def sequence_symbols(self, node: Node, owner: str) -> list[Symbol]:
        """The symbols that derive exactly `node`, appended in order."""
        if isinstance(node, Sequence):
            out: list[Symbol] = []
            for item in node.items:
                out.extend(self.sequence_symbols(item, owner))
            return out
        if isinstance(node, Chars):
            return [self.charset_symbol(node.charset)]
        if isinstance(node, RuleRef):
            return [(NONTERMINAL, self.rule_ids[node.name])]
        if isinstance(node, Token):
            return [self.token_symbol(node)]
        if isinstance(node, Alternatives):
            nt = self.synthetic(owner, "group")
            self.add_alternatives(nt, node, owner)
            return [(NONTERMINAL, nt)]
        if isinstance(node, Repeat):
            return self.repeat_symbols(node, owner)
        raise TypeError(f"unknown grammar node {node!r}")

    def single_symbol(self, node: Node, owner: str) -> Symbol:
        symbols = self.sequence_symbols(node, owner)
        if len(symbols) == 1:
            return symbols[0]
        nt = self.synthetic(owner, "item")
        self.productions.append((nt, tuple(symbols)))
        return (NONTERMINAL, nt)

    def repeat_symbols(self, node: Repeat, owner: str) -> list[Symbol]:
        low, high = node.min_count, node.max_count
        if high == 0:
            return []
        item = self.single_symbol(node.item, owner)
        if high is None:
            if low == 0:
                star = self.synthetic(owner, "star")
                self.productions.append((star, ()))
                self.productions.append((star, ((NONTERMINAL, star), item)))
                return [(NONTERMINAL, star)]
            plus = self.synthetic(owner, "plus")
            self.productions.append((plus, (item,)))
            self.productions.append((plus, ((NONTERMINAL, plus), item)))
            return [item] * (low - 1) + [(NONTERMINAL, plus)]
        out = [item] * low
        # chain_k ::= ε | item chain_{k-1}, built innermost first (chain_1 ::= ε | item)
        tail: tuple[Symbol, ...] = ()
        for _ in range(high - low):
            chain = self.synthetic(owner, "opt")
            self.productions.append((chain, ()))
            self.productions.append((chain, (item,) + tail))
            tail = ((NONTERMINAL, chain),)
        out.extend(tail)
        return out


def flatten(parsed: ParsedGrammar) -> FlatGrammar:
    """Flatten a validated syntax tree into BNF productions."""
    f = _Flattener(parsed)
    return FlatGrammar(
        names=tuple(f.names),
        productions=tuple(f.productions),
        charsets=tuple(f.charsets),
        token_terminals=tuple(f.tokens),
    )
