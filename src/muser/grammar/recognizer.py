"""`GrammarState`: one position in the language of a grammar, advanced byte by byte.

It is an Earley recognizer over code points (see automaton.py for the state
representation); bytes of an unfinished UTF-8 sequence are carried in the state,
so text may be split anywhere, including inside a character, across calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np

from muser.grammar.automaton import DEAD, UNKNOWN, Automaton, KernelState, TokenMatcher

if TYPE_CHECKING:
    from muser.grammar.grammar import Grammar


class GrammarState:
    """A recognizer position: everything that can follow the bytes accepted so far.

    Make one per generation with `Grammar.state()`. Operations:
    `accept_bytes` (advance, all or nothing), `allowed_next_bytes`, `can_end`,
    `clone` (O(1): a state is an id in the grammar's interned state table) and
    `reset`. Token-level terminals (`<[id]>`, `!<[id]>`) are only consumed by
    `accept_token` (a whole token); plain bytes never match them.

    Thread safety: a `GrammarState` must be used by one thread at a time; different
    states of the same `Grammar` may be used from different threads (the shared
    table is internally locked). Failure: a rejected input leaves the state unchanged.
    """

    __slots__ = ("grammar", "_automaton", "_sid")

    def __init__(self, grammar: "Grammar", automaton: Automaton, sid: int | None = None):
        self.grammar = grammar
        self._automaton = automaton
        self._sid = automaton.initial if sid is None else sid

    @property
    def state_id(self) -> int:
        """The interned id of this position (equal ids = identical futures)."""
        return self._sid

    @property
    def automaton(self) -> Automaton:
        return self._automaton

    def accept_bytes(self, data: bytes | bytearray | memoryview | Iterable[int]) -> bool:
        """Advance over `data`; on rejection return False and stay where it was."""
        sid = self._sid
        auto = self._automaton
        trans = auto.table
        for byte in bytes(data):
            nxt = trans.item(sid, byte) if sid < trans.shape[0] else UNKNOWN
            if nxt == UNKNOWN:
                nxt = auto.step(sid, byte)
                trans = auto.table
            if nxt == DEAD:
                return False
            sid = nxt
        self._sid = sid
        return True

    def accept_text(self, text: str) -> bool:
        """`accept_bytes(text.encode("utf-8"))`."""
        return self.accept_bytes(text.encode("utf-8"))

    def would_accept(self, data: bytes) -> bool:
        """Whether `accept_bytes(data)` would succeed; the state does not move."""
        return self.clone().accept_bytes(data)

    def allowed_next_bytes(self) -> np.ndarray:
        """`(256,) bool`: which single bytes may come next (continuation bytes inside a character)."""
        allowed: np.ndarray = self._automaton.row(self._sid) != DEAD
        return allowed

    def can_end(self) -> bool:
        """True when the input so far is a complete sentence (and not mid-character)."""
        return self._automaton.can_end(self._sid)

    def in_partial_character(self) -> bool:
        """True between the bytes of one multi-byte UTF-8 character."""
        return not isinstance(self._automaton.state(self._sid), KernelState)

    def accept_token(self, token_id: int, piece: bytes, matches: TokenMatcher | None = None) -> bool:
        """Advance over one whole token; on rejection return False and stay where it was.

        The token is read both as its bytes `piece` (through character terminals)
        and, when `matches` is given, as a token id through the grammar's token
        terminals (`matches(terminal_index, token_id) -> bool` resolves them for a
        vocabulary, see `GrammarConstraint`). If both readings succeed the states
        are merged; a byte reading that stops inside a character cannot merge and
        the token-terminal reading wins.
        """
        auto = self._automaton
        sid = self._sid
        st = auto.state(sid)
        if matches is None or not isinstance(st, KernelState) or not st.tokens:
            return bool(piece) and self.accept_bytes(piece)  # the common case: text only
        by_bytes = DEAD
        if piece:
            probe = GrammarState(self.grammar, auto, sid)
            if probe.accept_bytes(piece):
                by_bytes = probe._sid
        by_token = auto.token_step(sid, token_id, matches) if matches is not None else DEAD
        if by_token == DEAD:
            nxt = by_bytes
        elif by_bytes == DEAD or not isinstance(auto.state(by_bytes), KernelState):
            nxt = by_token
        else:
            nxt = auto.union(by_bytes, by_token)
        if nxt == DEAD:
            return False
        self._sid = nxt
        return True

    def clone(self) -> "GrammarState":
        """An independent copy at the same position."""
        return GrammarState(self.grammar, self._automaton, self._sid)

    def reset(self) -> None:
        """Back to the start of the grammar."""
        self._sid = self._automaton.initial

    def __repr__(self) -> str:
        return f"GrammarState(state={self._sid}, can_end={self.can_end()})"
