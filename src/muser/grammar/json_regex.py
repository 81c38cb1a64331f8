"""A JSON-schema `pattern` (a regular expression) -> GBNF for the *JSON-encoded* string body.

The grammar describes the text between the quotes, so each character the regex
allows is emitted the way JSON writes it (`"` as `\\"`, `\\` as `\\\\`, newline as
`\\n`...). Semantics follow JSON Schema (`re.search`): a pattern not anchored with
`^` may be preceded by anything, one without `$` may be followed by anything.

Supported: literals and escaped metacharacters, `.`, classes (ranges, negation,
`\\d \\w \\s \\D \\W \\S` inside or outside), groups (`(...)`, `(?:...)`,
`(?P<name>...)`), alternation, `* + ? {m} {m,} {m,n}` (lazy/possessive suffixes
are ignored: they do not change what matches), `^`/`$` at the ends of a
top-level alternative. Anything else (backreferences, lookaround, word
boundaries, inline flags) raises GrammarError.

The result is kept *sound*: every string it allows matches the pattern. Where the
regex engine's classes are wider than ASCII (`\\d` matches other digits too) the
grammar uses the ASCII part.
"""

from __future__ import annotations

from muser import limits
from muser.errors import GrammarError
from muser.grammar.charset import MAX_CODE_POINT, CharSet

REPEAT_LIMIT = 2000

_ASCII = CharSet([(0, 0x7F)])
_DIGIT = CharSet([(0x30, 0x39)])
_WORD = CharSet([(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), (0x5F, 0x5F)])
_SPACE = CharSet([(0x20, 0x20), (0x09, 0x0D)])
_CLASS_ESCAPES = {
    "d": _DIGIT,
    "w": _WORD,
    "s": _SPACE,
    # complements restricted to ASCII, where they agree with Python's Unicode classes
    "D": _ASCII.difference(_DIGIT),
    "W": _ASCII.difference(_WORD),
    "S": _ASCII.difference(_SPACE),
}
_CHAR_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
_META = set("\\^$.|?*+()[]{}/-\"'#&~ ,:;<>=!@%`")

# JSON string body: characters written as themselves (no quote, backslash, controls)
_PLAIN = CharSet([(0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CODE_POINT)])
# characters written as a two-character escape (other controls are left out)
_JSON_ESCAPES = {0x22: '\\"', 0x5C: "\\\\", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    out = ['"']
    for ch in text:
        cp = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif cp < 0x20 or cp == 0x7F:
            out.append(f"\\x{cp:02X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _class_char(cp: int) -> str:
    if cp in (0x5C, 0x5D, 0x5B, 0x5E, 0x2D, 0x22) or cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02X}" if cp < 0x100 else f"\\u{cp:04X}"
    if cp > 0xFFFF:
        return f"\\U{cp:08X}"
    return chr(cp)


def gbnf_class(charset: CharSet) -> str:
    """`charset` as a GBNF character class."""
    parts = []
    for lo, hi in charset.ranges:
        parts.append(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}")
    return "[" + "".join(parts) + "]"


def json_chars(charset: CharSet) -> str | None:
    """GBNF for one character of `charset` as it appears inside a JSON string; None if none can."""
    options = []
    plain = charset.intersection(_PLAIN)
    if not plain.is_empty():
        options.append(gbnf_class(plain))
    for cp, escaped in _JSON_ESCAPES.items():
        if cp in charset:
            options.append(gbnf_literal(escaped))
    if not options:
        return None
    return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"


def json_text(text: str) -> str:
    """GBNF literal for `text` JSON-encoded (body only, no quotes)."""
    encoded = []
    for ch in text:
        cp = ord(ch)
        if cp in _JSON_ESCAPES:
            encoded.append(_JSON_ESCAPES[cp])
        elif cp < 0x20:
            encoded.append(f"\\u{cp:04x}")
        else:
            encoded.append(ch)
    return gbnf_literal("".join(encoded))


class _RegexParser:
    def __init__(self, pattern: str, any_char: str):
        self.p = pattern
        self.i = 0
        self.any_char = any_char  # GBNF for one arbitrary JSON string character
        self.depth = 0  # open groups; bounded because parsing recurses per group

    def error(self, message: str) -> GrammarError:
        return GrammarError(f"pattern {self.p!r}, position {self.i}: {message}")

    def peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    def parse_top(self) -> str:
        options = []
        while True:
            anchored_start = False
            if self.peek() == "^":
                anchored_start = True
                self.i += 1
            body, anchored_end = self.parse_concat(top=True)
            parts = []
            if not anchored_start:
                parts.append(f"{self.any_char}*")
            if body:
                parts.append(f"({body})")
            if not anchored_end and (anchored_start or body):
                parts.append(f"{self.any_char}*")
            options.append(" ".join(parts) or '""')
            if self.peek() == "|":
                self.i += 1
                continue
            break
        if self.i != len(self.p):
            raise self.error("unbalanced ')'")
        return options[0] if len(options) == 1 else "(" + " | ".join(f"({o})" for o in options) + ")"

    def parse_alternatives(self) -> str:
        options = [self.parse_concat(top=False)[0]]
        while self.peek() == "|":
            self.i += 1
            options.append(self.parse_concat(top=False)[0])
        return "(" + " | ".join(o if o else '""' for o in options) + ")"

    def parse_concat(self, top: bool) -> tuple[str, bool]:
        items: list[str] = []
        anchored_end = False
        while True:
            c = self.peek()
            if c == "" or c == "|" or c == ")":
                break
            if c == "$":
                self.i += 1
                if top and self.peek() in ("", "|"):
                    anchored_end = True
                    break
                raise self.error("'$' is only supported at the end of the pattern")
            if c == "^":
                raise self.error("'^' is only supported at the start of the pattern")
            atom = self.parse_atom()
            atom = self.parse_quantifier(atom)
            items.append(atom)
        return " ".join(i for i in items if i), anchored_end

    def parse_quantifier(self, atom: str) -> str:
        c = self.peek()
        if c not in ("*", "+", "?", "{"):
            return atom
        if c == "{":
            close = self.p.find("}", self.i)
            inner = self.p[self.i + 1 : close] if close > 0 else ""
            lo_text, _, hi_text = inner.partition(",")
            if close < 0 or not lo_text.strip().isdigit() or (hi_text.strip() and not hi_text.strip().isdigit()):
                # Python treats a malformed brace as a literal "{"
                return atom
            lo = int(lo_text)
            hi = lo if "," not in inner else (int(hi_text) if hi_text.strip() else None)
            if hi is not None and hi < lo:
                raise self.error("repetition maximum below minimum")
            if max(lo, hi or 0) > REPEAT_LIMIT:
                raise self.error(f"repetition count above {REPEAT_LIMIT}")
            self.i = close + 1
            op = f"{{{lo}}}" if hi == lo else (f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}")
        else:
            self.i += 1
            op = c
        if self.peek() in ("?", "+"):
            self.i += 1  # lazy / possessive: same set of matches
        if not atom:
            return atom
        return f"({atom}){op}"

    def parse_atom(self) -> str:
        c = self.peek()
        if c == "(":
            self.depth += 1
            if self.depth > limits.MAX_GRAMMAR_NESTING:
                raise self.error(f"groups nested deeper than muser.limits.MAX_GRAMMAR_NESTING = "
                                 f"{limits.MAX_GRAMMAR_NESTING}")
            self.i += 1
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.p.startswith("?P<", self.i):
                close = self.p.find(">", self.i)
                if close < 0:
                    raise self.error("unterminated group name")
                self.i = close + 1
            elif self.peek() == "?":
                raise self.error("lookaround, inline flags and other '(?' groups are not supported")
            inner = self.parse_alternatives()
            if self.peek() != ")":
                raise self.error("missing ')'")
            self.i += 1
            self.depth -= 1
            return inner
        if c == "[":
            return self.char_expr(self.parse_class())
        if c == ".":
            self.i += 1
            return self.char_expr(CharSet.single(0x0A).negated())
        if c == "\\":
            return self.parse_escape_atom()
        if c in ("*", "+", "?"):
            raise self.error(f"nothing to repeat before '{c}'")
        self.i += 1
        return json_text(c)

    def char_expr(self, charset: CharSet) -> str:
        expr = json_chars(charset)
        if expr is None:
            raise self.error("character class allows no character that JSON strings can hold")
        return expr

    def parse_escape_atom(self) -> str:
        charset = self.parse_escape(in_class=False)
        if len(charset.ranges) == 1 and charset.ranges[0][0] == charset.ranges[0][1]:
            return json_text(chr(charset.ranges[0][0]))
        return self.char_expr(charset)

    def parse_escape(self, in_class: bool) -> CharSet:
        self.i += 1
        c = self.peek()
        if c == "":
            raise self.error("pattern ends with a backslash")
        self.i += 1
        if c in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[c]
        if c in _CHAR_ESCAPES:
            return CharSet.single(ord(_CHAR_ESCAPES[c]))
        if c == "x" or c == "u":
            width = 2 if c == "x" else 4
            digits = self.p[self.i : self.i + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"'\\{c}' needs {width} hex digits")
            self.i += width
            return CharSet.single(int(digits, 16))
        if c == "b" and in_class:
            return CharSet.single(0x08)
        if c in _META or not c.isalnum():
            return CharSet.single(ord(c))
        raise self.error(f"unsupported escape '\\{c}'")

    def parse_class(self) -> CharSet:
        self.i += 1
        negated = False
        if self.peek() == "^":
            negated = True
            self.i += 1
        ranges = CharSet([])
        first = True
        while True:
            c = self.peek()
            if c == "":
                raise self.error("unterminated character class")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            lo_set = self.parse_escape(in_class=True) if c == "\\" else self.take_char()
            is_single = len(lo_set.ranges) == 1 and lo_set.ranges[0][0] == lo_set.ranges[0][1]
            if is_single and self.peek() == "-" and self.p[self.i + 1 : self.i + 2] not in ("]", ""):
                self.i += 1
                hi_set = self.parse_escape(in_class=True) if self.peek() == "\\" else self.take_char()
                if len(hi_set.ranges) != 1 or hi_set.ranges[0][0] != hi_set.ranges[0][1]:
                    raise self.error("bad character range")
                lo, hi = lo_set.ranges[0][0], hi_set.ranges[0][0]
                if hi < lo:
                    raise self.error("character range is backwards")
                ranges = ranges.union(CharSet([(lo, hi)]))
            else:
                ranges = ranges.union(lo_set)
        return ranges.negated() if negated else ranges

    def take_char(self) -> CharSet:
        c = self.peek()
        self.i += 1
        return CharSet.single(ord(c))


def pattern_to_gbnf(pattern: str, any_char: str) -> str:
    """GBNF for the JSON-encoded body of strings that `re.search(pattern, s)` matches.

    `any_char` is the GBNF rule for one arbitrary JSON string character (used
    around unanchored patterns). Raises GrammarError for unsupported syntax.
    """
    return _RegexParser(pattern, any_char).parse_top()
