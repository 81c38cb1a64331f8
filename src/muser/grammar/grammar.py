"""`Grammar`: the public, immutable GBNF grammar object."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from muser import limits
from muser.errors import GrammarError
from muser.grammar.automaton import Automaton
from muser.grammar.expansion import check_expansion
from muser.grammar.flat_rules import FlatGrammar, flatten
from muser.grammar.parser import parse_gbnf
from muser.grammar.recognizer import GrammarState

if TYPE_CHECKING:
    from muser.grammar.constraint import GrammarConstraint
    from muser.grammar.token_mask import TokenTrie

# The interned state table of one grammar is a cache shared by all its states.
# Past this many states a fresh table is started for new states (states already
# handed out keep theirs), so a long-lived Grammar cannot grow without bound.
MAX_SHARED_STATES = 200_000


class _TableHolder:
    """The state table of one grammar text, replaced by a fresh one when it grows too big."""

    def __init__(self, flat: FlatGrammar):
        self._flat = flat
        self._lock = threading.Lock()
        self._automaton: Automaton | None = None

    def current(self) -> Automaton:
        with self._lock:
            auto = self._automaton
            if auto is None or auto.state_count > MAX_SHARED_STATES:
                auto = Automaton(self._flat)  # states already handed out keep the old one
                self._automaton = auto
            return auto


class _SharedTables:
    """State tables of recently built grammars, keyed by (text, root): a request that
    builds `Grammar.from_json_schema(same_schema)` again starts warm. Bounded, locked."""

    def __init__(self, max_entries: int):
        self._max = max_entries
        self._lock = threading.Lock()
        self._holders: OrderedDict[tuple[str, str], _TableHolder] = OrderedDict()

    def holder(self, text: str, root: str, flat: FlatGrammar) -> _TableHolder:
        key = (text, root)
        with self._lock:
            found = self._holders.get(key)
            if found is None:
                found = self._holders[key] = _TableHolder(flat)
            self._holders.move_to_end(key)
            while len(self._holders) > self._max:
                self._holders.popitem(last=False)
            return found


_SHARED_TABLES = _SharedTables(max_entries=16)


class Grammar:
    """A context-free grammar in llama.cpp's GBNF dialect.

    >>> g = muser.Grammar('root ::= "yes" | "no"')
    >>> g.matches("yes"), g.matches("maybe")
    (True, False)

    Constructors: `Grammar(gbnf_text, root="root")`,
    `Grammar.from_json_schema(schema)`, `Grammar.json()`.

    Thread safety: a Grammar is immutable and may be shared freely between
    threads and generations. Per-generation state lives in a `GrammarState`
    (`grammar.state()`) or a `GrammarConstraint` (`grammar.constraint(...)`),
    which must each be used by one thread at a time. Internally the grammar
    keeps a lazily built, lock-protected table of recognizer states that all its
    states share (and that grammars with the same text share: a few recent ones
    are kept), so a second generation with the same grammar starts warm.

    Failure: a malformed grammar raises `muser.GrammarError` whose message starts
    with `line L, column C:` (also available as `.line` / `.column`).
    Left-recursive and ambiguous grammars are accepted.
    """

    def __init__(self, gbnf_text: str, root: str = "root"):
        self._text = gbnf_text
        self._root = root
        parsed = parse_gbnf(gbnf_text, root)
        check_expansion(parsed)
        self._flat: FlatGrammar = flatten(parsed)
        self._tables = _SHARED_TABLES.holder(gbnf_text, root, self._flat)

    # ------------------------------------------------------------ constructors

    @classmethod
    def from_json_schema(cls, schema: Any) -> "Grammar":
        """A grammar for JSON text that validates against `schema` (dict, bool or JSON text).

        Supported: type (and type lists), properties/required/additionalProperties,
        enum/const, items/prefixItems with minItems/maxItems, string
        minLength/maxLength/pattern (a regex subset)/format (date, time, date-time,
        uuid), integer bounds (exact), number bounds (kept sound via the integer
        part), local `$ref` into `$defs`/`definitions`, anyOf/oneOf, allOf of object
        schemas. Properties are produced in declaration order, required ones first.
        Raises GrammarError for what cannot be expressed.
        """
        from muser.grammar.json_schema import json_schema_to_gbnf

        if isinstance(schema, (str, bytes)):
            if len(schema) > limits.MAX_GRAMMAR_CHARS:
                raise GrammarError(
                    f"JSON schema text has {len(schema)} characters, above "
                    f"muser.limits.MAX_GRAMMAR_CHARS = {limits.MAX_GRAMMAR_CHARS}"
                )
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise GrammarError(f"JSON schema is not valid JSON: {exc}") from None
            except RecursionError:
                # json.loads recurses per nesting level; the schema would be
                # refused for its depth (MAX_GRAMMAR_NESTING) anyway.
                raise GrammarError(
                    "JSON schema text is nested too deeply to parse "
                    f"(muser.limits.MAX_GRAMMAR_NESTING = {limits.MAX_GRAMMAR_NESTING})"
                ) from None
        return cls(json_schema_to_gbnf(schema))

    @classmethod
    def json(cls, *, any_value: bool = False) -> "Grammar":
        """JSON text: an object (default, like "JSON mode"), or any JSON value."""
        from muser.grammar.json_schema import json_schema_to_gbnf

        return cls(json_schema_to_gbnf({} if any_value else {"type": "object"}))

    # ------------------------------------------------------------ accessors

    @property
    def text(self) -> str:
        """The GBNF source text."""
        return self._text

    @property
    def root(self) -> str:
        return self._root

    @property
    def flat(self) -> FlatGrammar:
        """The flattened BNF productions (read-only)."""
        return self._flat

    def automaton(self) -> Automaton:
        """The shared state table new states start from (internal; thread safe)."""
        return self._tables.current()

    # ------------------------------------------------------------ use

    def state(self) -> GrammarState:
        """A fresh recognizer at the start of the grammar."""
        auto = self.automaton()
        return GrammarState(self, auto)

    def matches(self, text: str | bytes) -> bool:
        """Whether the whole of `text` is a sentence of the grammar."""
        if isinstance(text, str):
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:
                return False  # a lone surrogate: not Unicode text, so no sentence of any grammar
        else:
            data = bytes(text)
        st = self.state()
        return st.accept_bytes(data) and st.can_end()

    def constraint(
        self, token_bytes: "Sequence[bytes] | TokenTrie", eog_ids: Iterable[int] = ()
    ) -> "GrammarConstraint":
        """A sampler-side constraint for one generation (see GrammarConstraint)."""
        from muser.grammar.constraint import GrammarConstraint

        return GrammarConstraint(self, token_bytes, eog_ids)

    def __repr__(self) -> str:
        first = self._text.strip().splitlines()[0] if self._text.strip() else ""
        if len(first) > 60:
            first = first[:57] + "..."
        return f"Grammar({first!r}, root={self._root!r})"
