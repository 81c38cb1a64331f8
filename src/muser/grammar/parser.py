"""GBNF text -> syntax tree.

The dialect is llama.cpp's GBNF: `name ::= alternatives` rules, string literals,
character classes with ranges and negation, `.`, escapes (`\\x`, `\\u`, `\\U`, `\\t`,
`\\n`, `\\r`, `\\\\`, `\\"`, `\\[`, `\\]`), grouping, alternation, the postfix operators
`*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}` (and `{,n}`), `#` comments, and the newer
token-level terminals `<[id]>`, `<text>` and their negations `!<[id]>`, `!<text>`.

A rule ends at the end of its line unless the line ends inside parentheses or
right after `|` (after `::=` the body may also start on the next line).

Every syntax problem raises `muser.GrammarError` whose message starts with
`line L, column C:` and which carries `.line` and `.column` attributes (1-based).
Checks that need the whole grammar (undefined rules, a missing root) happen in
`parse_gbnf` after the text is read.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Iterable, TypeVar, Union

from muser import limits
from muser.errors import GrammarError
from muser.grammar.charset import MAX_CODE_POINT, CharSet

# Upper bound on `{m,n}` counts: a bound repetition is expanded into that many
# copies, so an absurd count would be a memory bomb, not a grammar.
REPETITION_LIMIT = 2000


# ---------------------------------------------------------------- syntax tree


@dataclass(frozen=True)
class Chars:
    """One code point from `charset` (a literal character, a class, or `.`)."""

    charset: CharSet


@dataclass(frozen=True)
class RuleRef:
    name: str
    line: int
    column: int


@dataclass(frozen=True)
class Token:
    """A token-level terminal: `<[id]>` (token_id) or `<text>` (text), maybe negated."""

    token_id: int | None
    text: str | None
    negated: bool


@dataclass(frozen=True)
class Repeat:
    item: "Node"
    min_count: int
    max_count: int | None  # None = unbounded


@dataclass(frozen=True)
class Sequence:
    items: tuple["Node", ...]


@dataclass(frozen=True)
class Alternatives:
    options: tuple[Sequence, ...]


Node = Union[Chars, RuleRef, Token, Repeat, Sequence, Alternatives]
_AnyNode = TypeVar("_AnyNode", Chars, RuleRef, Token, Repeat, Sequence, Alternatives)


@dataclass(frozen=True)
class RuleDef:
    name: str
    body: Alternatives
    line: int
    column: int


@dataclass(frozen=True)
class ParsedGrammar:
    """The rules of a grammar in definition order, validated."""

    rules: tuple[RuleDef, ...]
    root: str

    def rule_map(self) -> dict[str, RuleDef]:
        return {r.name: r for r in self.rules}


def grammar_error(message: str, line: int, column: int) -> GrammarError:
    """A `GrammarError` saying where: `line L, column C: message`."""
    err = GrammarError(f"line {line}, column {column}: {message}")
    err.line = line  # type: ignore[attr-defined]
    err.column = column  # type: ignore[attr-defined]
    return err


# ---------------------------------------------------------------- parser

_SIMPLE_ESCAPES = {
    "n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]",
}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def _is_name_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c in "-_")


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        # Nesting depth of each group/repetition node built (by id): every
        # later pass walks the tree recursively, so the depth is bounded here.
        self.depth_of: dict[int, int] = {}
        self.open_groups = 0  # parsing itself recurses once per open '(' 
        self.line_starts = [0]
        for i, c in enumerate(text):
            if c == "\n":
                self.line_starts.append(i + 1)

    # -- positions and errors

    def where(self, pos: int) -> tuple[int, int]:
        k = bisect_right(self.line_starts, pos) - 1
        return k + 1, pos - self.line_starts[k] + 1

    def error(self, message: str, pos: int | None = None) -> GrammarError:
        line, column = self.where(self.pos if pos is None else pos)
        return grammar_error(message, line, column)

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.text[i] if i < len(self.text) else ""

    def describe_here(self) -> str:
        c = self.peek()
        return "end of input" if not c else repr(c)

    # -- whitespace

    def skip_space(self, newlines: bool) -> None:
        """Skip blanks and comments; newlines too when `newlines` is true."""
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            if c in " \t":
                self.pos += 1
            elif c == "#":
                while self.pos < len(text) and text[self.pos] not in "\r\n":
                    self.pos += 1
            elif newlines and c in "\r\n":
                self.pos += 1
            else:
                break

    # -- grammar

    def parse(self) -> list[RuleDef]:
        rules = []
        self.skip_space(newlines=True)
        while self.pos < len(self.text):
            rules.append(self.parse_rule())
            self.skip_space(newlines=True)
        return rules

    def parse_rule(self) -> RuleDef:
        start = self.pos
        name = self.parse_name()
        line, column = self.where(start)
        self.skip_space(newlines=False)
        if not self.text.startswith("::=", self.pos):
            raise self.error(f"expected '::=' after rule name '{name}', found {self.describe_here()}")
        self.pos += 3
        self.skip_space(newlines=True)
        body = self.parse_alternatives(nested=False)
        if self.pos < len(self.text) and self.peek() not in "\r\n":
            if self.peek() == ")":
                raise self.error("unbalanced ')'")
            raise self.error(f"expected end of line after rule '{name}', found {self.describe_here()}")
        return RuleDef(name, body, line, column)

    def parse_name(self) -> str:
        start = self.pos
        while self.pos < len(self.text) and _is_name_char(self.text[self.pos]):
            self.pos += 1
        if self.pos == start:
            raise self.error(f"expected a rule name, found {self.describe_here()}")
        return self.text[start : self.pos]

    def nest(self, node: _AnyNode, children: Iterable[Node], pos: int) -> _AnyNode:
        """Record `node`'s depth (one more than its deepest child) and bound it."""
        depth = 1 + max((self.depth_of.get(id(c), 0) for c in children), default=0)
        if depth > limits.MAX_GRAMMAR_NESTING:
            raise self.error(
                f"groups and repetitions nested deeper than muser.limits.MAX_GRAMMAR_NESTING = "
                f"{limits.MAX_GRAMMAR_NESTING}", pos)
        self.depth_of[id(node)] = depth
        return node

    def parse_alternatives(self, nested: bool) -> Alternatives:
        start = self.pos
        options = [self.parse_sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.skip_space(newlines=True)
            options.append(self.parse_sequence(nested))
        return self.nest(Alternatives(tuple(options)), options, start)

    def parse_sequence(self, nested: bool) -> Sequence:
        start = self.pos
        items: list[Node] = []
        while True:
            self.skip_space(newlines=nested)
            c = self.peek()
            if c == "" or c in "|)" or c in "\r\n":
                break
            if c in "*+?{":
                if not items:
                    raise self.error(f"'{c}' has no preceding item to repeat")
                op_pos = self.pos
                items[-1] = self.nest(self.parse_postfix(items[-1], op_pos), [items[-1]], op_pos)
                continue
            items.append(self.parse_element())
        return self.nest(Sequence(tuple(items)), items, start)

    def parse_postfix(self, item: Node, op_pos: int) -> Repeat:
        c = self.peek()
        self.pos += 1
        if c == "*":
            return Repeat(item, 0, None)
        if c == "+":
            return Repeat(item, 1, None)
        if c == "?":
            return Repeat(item, 0, 1)
        # {m}, {m,}, {m,n}, {,n}
        self.skip_space(newlines=False)
        low = self.parse_count(optional=True)
        self.skip_space(newlines=False)
        high: int | None
        if self.peek() == ",":
            self.pos += 1
            self.skip_space(newlines=False)
            high = self.parse_count(optional=True)
            self.skip_space(newlines=False)
        else:
            if low is None:
                raise self.error("expected a count inside '{...}'")
            high = low
        if self.peek() != "}":
            raise self.error(f"expected '}}' to close the repetition, found {self.describe_here()}")
        self.pos += 1
        if low is None:
            low = 0
        if high is not None and high < low:
            raise self.error(f"repetition maximum {high} is below its minimum {low}", op_pos)
        if max(low, high or 0) > REPETITION_LIMIT:
            raise self.error(f"repetition count above the limit of {REPETITION_LIMIT}", op_pos)
        return Repeat(item, low, high)

    def parse_count(self, optional: bool) -> int | None:
        start = self.pos
        while self.peek().isascii() and self.peek().isdigit():
            self.pos += 1
        if self.pos == start:
            if optional:
                return None
            raise self.error("expected a number")
        return int(self.text[start : self.pos])

    def parse_element(self) -> Node:
        c = self.peek()
        start = self.pos
        if c == '"':
            return self.parse_literal()
        if c == "[":
            return self.parse_class()
        if c == ".":
            self.pos += 1
            return Chars(CharSet.any())
        if c == "(":
            self.open_groups += 1
            if self.open_groups > limits.MAX_GRAMMAR_NESTING:
                raise self.error(
                    f"groups nested deeper than muser.limits.MAX_GRAMMAR_NESTING = {limits.MAX_GRAMMAR_NESTING}")
            self.pos += 1
            self.skip_space(newlines=True)
            inner = self.parse_alternatives(nested=True)
            if self.peek() != ")":
                raise self.error("expected ')' to close the group opened", start)
            self.pos += 1
            self.open_groups -= 1
            if len(inner.options) == 1:
                return inner.options[0]
            return inner
        if c == "<" or c == "!":
            return self.parse_token()
        if _is_name_char(c):
            name = self.parse_name()
            line, column = self.where(start)
            return RuleRef(name, line, column)
        if self.text.startswith("::=", self.pos):
            raise self.error("'::=' inside a rule: each rule must start on its own line")
        raise self.error(f"unexpected character {c!r}")

    def parse_literal(self) -> Node:
        start = self.pos
        self.pos += 1
        cps: list[int] = []
        while True:
            c = self.peek()
            if c == "" or c in "\r\n":
                raise self.error("unterminated string literal", start)
            if c == '"':
                self.pos += 1
                break
            cps.append(self.parse_char())
        return Sequence(tuple(Chars(CharSet.single(cp)) for cp in cps))

    def parse_char(self) -> int:
        """One possibly escaped character of a literal or class, as a code point."""
        c = self.peek()
        if c != "\\":
            self.pos += 1
            return ord(c)
        esc_pos = self.pos
        kind = self.peek(1)
        if kind in _SIMPLE_ESCAPES:
            self.pos += 2
            return ord(_SIMPLE_ESCAPES[kind])
        if kind in _HEX_ESCAPES:
            width = _HEX_ESCAPES[kind]
            digits = self.text[self.pos + 2 : self.pos + 2 + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"bad escape: '\\{kind}' needs {width} hex digits", esc_pos)
            value = int(digits, 16)
            if value > MAX_CODE_POINT:
                raise self.error(f"bad escape: U+{value:X} is beyond U+10FFFF", esc_pos)
            self.pos += 2 + width
            return value
        if kind == "":
            raise self.error("bad escape at end of input", esc_pos)
        raise self.error(f"bad escape '\\{kind}'", esc_pos)

    def parse_class(self) -> Chars:
        start = self.pos
        self.pos += 1
        negated = False
        if self.peek() == "^":
            negated = True
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while True:
            c = self.peek()
            if c == "" or c in "\r\n":
                raise self.error("unterminated character class", start)
            if c == "]":
                self.pos += 1
                break
            lo_pos = self.pos
            lo = self.parse_char()
            hi = lo
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                hi = self.parse_char()
                if hi < lo:
                    raise self.error("character range is backwards", lo_pos)
            ranges.append((lo, hi))
        if not ranges:
            raise self.error("empty character class", start)
        charset = CharSet(ranges)
        if negated:
            charset = charset.negated()
            if charset.is_empty():
                raise self.error("negated character class matches nothing", start)
        return Chars(charset)

    def parse_token(self) -> Token:
        start = self.pos
        negated = False
        if self.peek() == "!":
            negated = True
            self.pos += 1
            if self.peek() != "<":
                raise self.error("'!' must be followed by a token terminal '<...>'", start)
        self.pos += 1  # '<'
        if self.peek() == "[":
            self.pos += 1
            token_id = self.parse_count(optional=False)
            if not self.text.startswith("]>", self.pos):
                raise self.error("expected ']>' to close the token id", start)
            self.pos += 2
            return Token(token_id, None, negated)
        end = self.pos
        while end < len(self.text) and self.text[end] not in ">\r\n":
            end += 1
        if end >= len(self.text) or self.text[end] != ">" or end == self.pos:
            raise self.error("unterminated token terminal (expected '<[id]>' or '<text>')", start)
        text = "<" + self.text[self.pos : end] + ">"
        self.pos = end + 1
        return Token(None, text, negated)


def _walk_refs(node: Node, out: list[RuleRef]) -> None:
    if isinstance(node, RuleRef):
        out.append(node)
    elif isinstance(node, Repeat):
        _walk_refs(node.item, out)
    elif isinstance(node, Sequence):
        for item in node.items:
            _walk_refs(item, out)
    elif isinstance(node, Alternatives):
        for option in node.options:
            _walk_refs(option, out)


def parse_gbnf(text: str, root: str = "root") -> ParsedGrammar:
    """Parse and validate GBNF text.

    Raises `GrammarError` (with line and column) on a syntax error, a rule
    defined twice, a reference to an undefined rule, or a missing `root` rule.
    """
    if not isinstance(text, str):
        raise TypeError(f"grammar text must be str, got {type(text).__name__}")
    if len(text) > limits.MAX_GRAMMAR_CHARS:
        raise grammar_error(
            f"grammar text has {len(text)} characters, above muser.limits.MAX_GRAMMAR_CHARS = "
            f"{limits.MAX_GRAMMAR_CHARS}", 1, 1)
    parser = _Parser(text)
    rules = parser.parse()
    seen: dict[str, RuleDef] = {}
    for rule in rules:
        if rule.name in seen:
            first = seen[rule.name]
            raise grammar_error(
                f"rule '{rule.name}' is defined twice (first at line {first.line})",
                rule.line, rule.column,
            )
        seen[rule.name] = rule
    for rule in rules:
        refs: list[RuleRef] = []
        _walk_refs(rule.body, refs)
        for ref in refs:
            if ref.name not in seen:
                raise grammar_error(f"undefined rule '{ref.name}'", ref.line, ref.column)
    if root not in seen:
        raise grammar_error(f"grammar has no rule named '{root}' to start from", 1, 1)
    return ParsedGrammar(tuple(rules), root)
