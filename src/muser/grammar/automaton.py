"""The recognizer's state space: Earley columns interned into a lazily built byte automaton.

How it works
------------
An Earley item is `(pd, origin)`: `pd` numbers a production with a dot position
(advancing the dot is `pd + 1`), `origin` says where the production started.
Instead of pointing at absolute input positions, an origin names an interned
*context*: the items of the starting column that were waiting on a nonterminal
(their own origins being contexts again), restricted to those the items that
start there can ever complete. Two columns with the same context behave
identically for every later completion, so they are merged; and what the
restriction drops (e.g. how many optional spaces preceded a value) cannot split
identical futures into different states. A recognizer state is identified by its
*kernel* (the items produced by the last scan); its closure (predict/complete)
is computed once per distinct kernel and kept.

Because states are interned, transitions can be memoized: `trans[state, byte]`
is the next state (0 = dead). Rows are built lazily: bytes no item can start
with are dead from the first touch, and each group of bytes with one outcome is
computed when first read. The token-mask walk (token_mask.py) reads this table
with NumPy over the whole vocabulary trie; the check-only path is a few table
reads per token.

Bytes, not code points, drive the table. Between the lead byte and the last
continuation byte of a multi-byte UTF-8 sequence the state is a *partial* state
carrying the range of code points still possible ([lo, hi]) and how many bytes
remain; a prefix that no terminal can complete is dead at once, and overlong
forms, surrogates and values above U+10FFFF are rejected. When every code point
of a partial state's range moves the grammar the same way, the partial state
only counts the remaining bytes ("resolved"), so, e.g., all 3-byte characters
inside a JSON string share a handful of states.

Memory is bounded by the number of distinct states: for grammars written with
repetition operators (`*`, `+`, `{m,n}`) a long output revisits the same states
(a 125 kB JSON output settles at ~160 states). Right recursion written by hand
(`list ::= item list | item`) needs a new context per repetition (memory grows
linearly, as in any Earley recognizer); completion chains are memoized per
(context, nonterminal), so the time per step stays constant.

Thread safety: the tables are a cache owned by one grammar text and shared by
every state made from it. Reads take no lock; computing a transition, interning
a state or growing the table happens under `self._lock`, and a grown table is
published only after it holds every row, so a reader that holds an older table
and sees `UNKNOWN` simply asks again under the lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Optional, cast

import numpy as np

from muser import limits
from muser.errors import GrammarError, InternalError
from muser.grammar.charset import CharSet
from muser.grammar.flat_rules import CHAR, NONTERMINAL, TOKEN, FlatGrammar

DEAD = 0
UNKNOWN = -1

# Token masks (one bool per vocabulary entry) kept per automaton, across generations.
MASK_CACHE_BYTES = 64 << 20  # ~2k dense masks of a 262k vocabulary (packed bits), more sparse ones

_COMPLETE = 3  # pd kind: the dot is at the end of the production
_SELF = -1  # item origin: "this very column" (only inside one closure or context key)

# A token-terminal matcher: token terminal index -> does this token id match it?
TokenMatcher = Callable[[int, int], bool]


@dataclass(frozen=True, eq=False)
class KernelState:
    """A state between whole code points: the Earley column after a scan."""

    kernel: frozenset[Any]
    # (charset index, advanced pd, origin) for every item expecting a character;
    # origin _SELF means "this column" and is resolved when the item is scanned
    scan: tuple[tuple[int, int, int], ...]
    # (token terminal index, advanced pd, origin) for token-terminal items
    tokens: tuple[tuple[int, int, int], ...]
    can_end: bool
    # nonterminal -> items of this column waiting on it (origin may be _SELF)
    waiting: dict[int, Any]


@dataclass(frozen=True)
class ExactPartialState:
    """Inside a UTF-8 sequence whose code point still decides what matches."""

    base: int  # the KernelState id the sequence started from
    lo: int
    hi: int
    remaining: int  # continuation bytes still expected


@dataclass(frozen=True)
class ResolvedPartialState:
    """Inside a UTF-8 sequence whose outcome is already known: `target` after `remaining` bytes."""

    target: int
    remaining: int


State = Optional[object]  # KernelState | ExactPartialState | ResolvedPartialState | None (dead)

# UTF-8 lead byte -> (continuation bytes, payload mask, smallest code point of that length)
_LEAD = {}
for _b in range(0xC2, 0xE0):
    _LEAD[_b] = (1, 0x1F, 0x80)
for _b in range(0xE0, 0xF0):
    _LEAD[_b] = (2, 0x0F, 0x800)
for _b in range(0xF0, 0xF5):
    _LEAD[_b] = (3, 0x07, 0x10000)


def _clamp_valid(lo: int, hi: int) -> tuple[int, int]:
    """Cut surrogates and values above U+10FFFF out of an aligned code point range."""
    hi = min(hi, 0x10FFFF)
    if lo <= 0xDFFF and hi >= 0xD800:
        # an aligned UTF-8 prefix range touching the surrogates either lies inside
        # them (empty result) or is ED's D000-DFFF block (keep D000-D7FF)
        if lo >= 0xD800:
            lo = max(lo, 0xE000)
        else:
            hi = 0xD7FF
    return lo, hi


_PARTIAL_DEAD = 0
_PARTIAL_RESOLVED = 1
_PARTIAL_EXACT = 2


class _ScanPlan:
    """For a tuple of character sets: which bytes select which of them.

    `ascii_groups`: (bitmask of matching sets, bytes) for ASCII bytes matching any.
    `leads`: (lead byte, bitmask or 0, lo, hi, continuation bytes) for every UTF-8
    lead byte some set can continue; a nonzero bitmask means every code point the
    sequence can still become matches exactly those sets ("resolved"), 0 means the
    code point decides ("exact").
    """

    __slots__ = ("charsets", "ascii_groups", "ascii_group_of", "leads", "lead_of", "_classified")
    ascii_groups: tuple[tuple[int, list[int]], ...]
    ascii_group_of: list[int]
    leads: tuple[tuple[int, int, int, int, int], ...]
    lead_of: dict[int, int]

    def __init__(self, charsets: list[CharSet]):
        self.charsets = charsets
        self._classified: dict[tuple[int, int, int], tuple[int, int]] = {}

    @classmethod
    def build(cls, charsets: list[CharSet]) -> "_ScanPlan":
        plan = cls(charsets)
        # partition the 128 ASCII bytes (as bitmasks) by every set's ASCII part
        groups = [((1 << 128) - 1, 0)]  # (bytes bitmask, matching sets bitmask)
        for i, bits in enumerate(cs.ascii_bits for cs in charsets):
            if not bits:
                continue
            refined = []
            for members, match in groups:
                inside, outside = members & bits, members & ~bits
                if inside:
                    refined.append((inside, match | (1 << i)))
                if outside:
                    refined.append((outside, match))
            groups = refined
        plan.ascii_groups = tuple(
            (match, [b for b in range(128) if (members >> b) & 1]) for members, match in groups if match
        )
        plan.ascii_group_of = [-1] * 128
        for index, (_, byte_list) in enumerate(plan.ascii_groups):
            for byte in byte_list:
                plan.ascii_group_of[byte] = index
        leads = []
        if any(cs.ranges and cs.ranges[-1][1] >= 0x80 for cs in charsets):
            for byte, (remaining, payload, smallest) in _LEAD.items():
                value = byte & payload
                lo = max(value << (6 * remaining), smallest)
                hi = ((value + 1) << (6 * remaining)) - 1
                lo, hi = _clamp_valid(lo, hi)
                if lo > hi:
                    continue
                kind, match = plan.classify(lo, hi, remaining)
                if kind != _PARTIAL_DEAD:
                    leads.append((byte, match if kind == _PARTIAL_RESOLVED else 0, lo, hi, remaining))
        plan.leads = tuple(leads)
        plan.lead_of = {lead[0]: index for index, lead in enumerate(plan.leads)}
        return plan

    def classify(self, lo: int, hi: int, remaining: int) -> tuple[int, int]:
        """(kind, bitmask) for a partial sequence whose code point lies in [lo, hi]."""
        key = (lo, hi, remaining)
        hit = self._classified.get(key)
        if hit is not None:
            return hit
        overlaps = [cs.overlap(lo, hi) for cs in self.charsets]
        if not any(overlaps):
            out = (_PARTIAL_DEAD, 0)
        elif hi - lo + 1 == 1 << (6 * remaining) and 1 not in overlaps:
            out = (_PARTIAL_RESOLVED, sum(1 << i for i, o in enumerate(overlaps) if o == 2))
        else:
            out = (_PARTIAL_EXACT, 0)
        self._classified[key] = out
        return out


class Automaton:
    """Interned recognizer states and their memoized byte transitions for one grammar."""

    def __init__(self, flat: FlatGrammar):
        self.flat = flat
        kinds: list[int] = []
        syms: list[int] = []
        lhss: list[int] = []
        first_pds: list[list[int]] = [[] for _ in flat.names]
        for lhs, rhs in flat.productions:
            first_pds[lhs].append(len(kinds))
            for kind, idx in rhs:
                kinds.append(kind)
                syms.append(idx)
                lhss.append(lhs)
            kinds.append(_COMPLETE)
            syms.append(-1)
            lhss.append(lhs)
        self._pd_kind = kinds
        self._pd_sym = syms
        self._pd_lhs = lhss
        self._first = [tuple(x) for x in first_pds]
        self._nullable = self._compute_nullable()
        self._charsets = flat.charsets

        self._lock = threading.Lock()
        self._mask_lock = threading.Lock()
        self._masks: OrderedDict[tuple[int, int], tuple[object, int]] = OrderedDict()
        self._mask_bytes = 0
        self._states: list[State] = [None]
        self._kernel_ids: dict[frozenset[Any], int] = {}
        self._partial_ids: dict[object, int] = {}
        self._ctx_ids: dict[frozenset[Any], int] = {}
        self._ctxs: list[dict[int, tuple[tuple[int, int], ...]]] = []
        self._plans: dict[tuple[int, ...], _ScanPlan] = {}
        self._ctx_memo: dict[tuple[int, frozenset[Any]], int] = {}
        self._completion_memo: dict[tuple[int, int], tuple[frozenset[Any], bool]] = {}
        self._skeleton: list[bool] = [True]  # row initialised (impossible bytes set DEAD)
        self._complete: list[bool] = [True]  # every entry of the row computed
        trans = np.full((256, 256), UNKNOWN, dtype=np.int32)
        trans[DEAD] = DEAD
        self._trans = trans
        with self._lock:
            self.initial = self._intern_kernel(frozenset({(self._first[flat.start][0], _SELF)}))

    # ------------------------------------------------------------ mask cache

    def cached_mask(self, key: tuple[int, int]) -> object | None:
        """A token mask stored by `store_mask` (key: (trie serial, state id)), or None."""
        with self._mask_lock:
            entry = self._masks.get(key)
            if entry is None:
                return None
            self._masks.move_to_end(key)
            return entry[0]

    def store_mask(self, key: tuple[int, int], mask: object, nbytes: int) -> None:
        """Keep `mask` (any immutable form, `nbytes` large) for `key`; least recently used go past the budget."""
        with self._mask_lock:
            if key in self._masks:
                return
            self._masks[key] = (mask, nbytes)
            self._mask_bytes += nbytes
            while self._mask_bytes > MASK_CACHE_BYTES and len(self._masks) > 1:
                _, (_, old_bytes) = self._masks.popitem(last=False)
                self._mask_bytes -= old_bytes

    # ------------------------------------------------------------ public reads

    @property
    def table(self) -> np.ndarray:
        """The transition table `(capacity, 256) int32`; rows of unfilled states hold UNKNOWN."""
        return self._trans

    @property
    def state_count(self) -> int:
        return len(self._states)

    def state(self, sid: int) -> State:
        return self._states[sid]

    def can_end(self, sid: int) -> bool:
        st = self._states[sid]
        return isinstance(st, KernelState) and st.can_end

    def row(self, sid: int) -> np.ndarray:
        """All 256 transitions of `sid` (computed on first use)."""
        trans = self._trans
        if sid < trans.shape[0] and self._complete[sid]:
            row: np.ndarray = trans[sid]
            return row
        with self._lock:
            for byte in range(256):
                self._entry(sid, byte)
            self._complete[sid] = True
            filled: np.ndarray = self._trans[sid]
            return filled

    def step(self, sid: int, byte: int) -> int:
        """The state after `byte` from `sid` (DEAD if rejected)."""
        trans = self._trans
        nxt = trans.item(sid, byte) if sid < trans.shape[0] else UNKNOWN
        if nxt == UNKNOWN:
            with self._lock:
                nxt = self._entry(sid, byte)
        return nxt

    def fill_entries(self, sids: np.ndarray, byte_values: np.ndarray) -> None:
        """Compute the transitions (sids[i], byte_values[i]) the mask walk found unknown, under one lock."""
        pairs = np.unique(sids.astype(np.int64) * 256 + byte_values)
        with self._lock:
            for pair in pairs.tolist():
                self._entry(pair >> 8, pair & 0xFF)

    def token_step(self, sid: int, token_id: int, matches: TokenMatcher) -> int:
        """The state after a whole token consumed by token terminals (`<[id]>`, `!<[id]>`)."""
        st = self._states[sid]
        if not isinstance(st, KernelState) or not st.tokens:
            return DEAD
        items = [(pd, org) for term, pd, org in st.tokens if matches(term, token_id)]
        if not items:
            return DEAD
        with self._lock:
            return self._advance(sid, st, items)

    def union(self, a: int, b: int) -> int:
        """The state whose column holds the items of both `a` and `b` (both whole-character states)."""
        sa, sb = self._states[a], self._states[b]
        if not isinstance(sa, KernelState) or not isinstance(sb, KernelState):
            raise ValueError("only whole-character states can be merged")
        with self._lock:
            return self._intern_kernel(sa.kernel | sb.kernel)

    # ------------------------------------------------------------ construction

    def _compute_nullable(self) -> list[bool]:
        nullable = [False] * len(self.flat.names)
        changed = True
        while changed:
            changed = False
            for lhs, rhs in self.flat.productions:
                if nullable[lhs]:
                    continue
                if all(kind == NONTERMINAL and nullable[idx] for kind, idx in rhs):
                    nullable[lhs] = True
                    changed = True
        return nullable

    def _new_state(self, st: State) -> int:
        sid = len(self._states)
        self._states.append(st)
        self._skeleton.append(False)
        self._complete.append(False)
        trans = self._trans
        if sid >= trans.shape[0]:
            grown = np.full((trans.shape[0] * 2, 256), UNKNOWN, dtype=np.int32)
            grown[: trans.shape[0]] = trans
            self._trans = grown  # published complete: old readers just see UNKNOWN
        return sid

    def _intern_kernel(self, kernel: frozenset[Any]) -> int:
        sid = self._kernel_ids.get(kernel)
        if sid is None:
            st = self._close(kernel)
            sid = DEAD if st is None else self._new_state(st)
            self._kernel_ids[kernel] = sid
        return sid

    def _close(self, kernel: frozenset[Any]) -> KernelState | None:
        """Earley predict/complete to a fixpoint; None if nothing can follow and it cannot end."""
        kinds, syms, lhss = self._pd_kind, self._pd_sym, self._pd_lhs
        nullable, first = self._nullable, self._first
        seen = set(kernel)
        stack = list(kernel)
        waiting: dict[int, list[tuple[int, int]]] = {}
        completed_here: set[int] = set()
        predicted: set[int] = set()
        scan: list[tuple[int, int]] = []
        tokens: list[tuple[int, int]] = []
        can_end = False
        push = stack.append
        max_items = limits.MAX_RECOGNIZER_ITEMS
        while stack:
            if len(seen) > max_items:
                # An ambiguous grammar keeps this many parses alive at once;
                # past the bound, refuse rather than take unbounded time and memory.
                raise GrammarError(
                    f"the grammar is too ambiguous here: one recognizer state needs more than "
                    f"muser.limits.MAX_RECOGNIZER_ITEMS = {max_items} Earley items"
                )
            item = stack.pop()
            pd, org = item
            kind = kinds[pd]
            if kind == NONTERMINAL:
                nt = syms[pd]
                lst = waiting.get(nt)
                if lst is None:
                    waiting[nt] = [item]
                else:
                    lst.append(item)
                if nullable[nt] or nt in completed_here:
                    nxt = (pd + 1, org)
                    if nxt not in seen:
                        seen.add(nxt)
                        push(nxt)
                if nt not in predicted:
                    predicted.add(nt)
                    for f in first[nt]:
                        nxt = (f, _SELF)
                        if nxt not in seen:
                            seen.add(nxt)
                            push(nxt)
            elif kind == _COMPLETE:
                nt = lhss[pd]
                if nt == 0:
                    can_end = True  # START completed: the whole input derives root
                    continue
                if org == _SELF:
                    if nt in completed_here:
                        continue
                    completed_here.add(nt)
                    for wpd, worg in tuple(waiting.get(nt, ())):
                        nxt = (wpd + 1, worg)
                        if nxt not in seen:
                            seen.add(nxt)
                            push(nxt)
                else:
                    advanced, reaches_start = self._complete_from(org, nt)
                    if reaches_start:
                        can_end = True
                    for nxt in advanced:
                        if nxt not in seen:
                            seen.add(nxt)
                            push(nxt)
            elif kind == CHAR:
                scan.append(item)
            else:
                tokens.append(item)
        if not scan and not tokens and not can_end:
            return None
        return KernelState(
            kernel=kernel,
            scan=tuple((syms[pd], pd + 1, org) for pd, org in scan),
            tokens=tuple((syms[pd], pd + 1, org) for pd, org in tokens),
            can_end=can_end,
            waiting={nt: tuple(items) for nt, items in waiting.items()},
        )

    def _complete_from(self, ctx: int, nt: int) -> tuple[frozenset[Any], bool]:
        """Complete `nt` started at context `ctx`, following chains of completions.

        Returns the advanced items that are not complete yet, and whether the
        start symbol completed. Memoized per (context, nonterminal), including
        every pair met along a chain, so right recursion (`list ::= item list`),
        whose chains grow by one context per repetition, costs O(1) per step
        instead of walking the whole chain each time (Leo's concern, met by
        memoization). Iterative, so long chains cannot overflow the stack; pairs
        caught in a completion cycle are recomputed rather than memoized partially.
        """
        memo = self._completion_memo
        hit = memo.get((ctx, nt))
        if hit is not None:
            return hit
        kinds, lhss, ctxs = self._pd_kind, self._pd_lhs, self._ctxs
        # frame: [pair, items, reaches_start, pending children, lowest open ancestor depth touched]
        depth_of: dict[tuple[int, int], int] = {(ctx, nt): 0}
        frames: list[list[Any]] = [[(ctx, nt), set(), False, None, 0]]
        result: tuple[frozenset[Any], bool] = (frozenset(), False)
        while frames:
            frame = frames[-1]
            pair = frame[0]
            if frame[3] is None:
                children = []
                for wpd, worg in ctxs[pair[0]].get(pair[1], ()):
                    adv = wpd + 1
                    if kinds[adv] != _COMPLETE:
                        frame[1].add((adv, worg))
                    elif lhss[adv] == 0:
                        frame[2] = True
                    else:
                        children.append((worg, lhss[adv]))
                frame[3] = children
                frame[4] = len(frames) - 1
            if frame[3]:
                child = frame[3].pop()
                done = memo.get(child)
                if done is not None:
                    frame[1] |= done[0]
                    frame[2] = frame[2] or done[1]
                elif child in depth_of:
                    frame[4] = min(frame[4], depth_of[child])  # a cycle back to an open frame
                else:
                    depth_of[child] = len(frames)
                    frames.append([child, set(), False, None, 0])
                continue
            frames.pop()
            del depth_of[pair]
            result = (frozenset(frame[1]), frame[2])
            if frame[4] >= len(frames):
                memo[pair] = result  # nothing open above it was missing
            if frames:
                parent = frames[-1]
                parent[1] |= frame[1]
                parent[2] = parent[2] or frame[2]
                parent[4] = min(parent[4], frame[4])
        return result

    def _advance(self, sid: int, st: KernelState, items: Any) -> int:
        """The state after scanning: `items` are the advanced (pd, origin) pairs that matched."""
        if not items:
            return DEAD
        self_lhs = frozenset(self._pd_lhs[pd] for pd, org in items if org == _SELF)
        if not self_lhs:
            return self._intern_kernel(frozenset(items))
        cid = self._ctx_memo.get((sid, self_lhs))
        if cid is None:
            cid = self._restricted_ctx(st, self_lhs)
            self._ctx_memo[(sid, self_lhs)] = cid
        return self._intern_kernel(frozenset((pd, cid if org == _SELF else org) for pd, org in items))

    def _restricted_ctx(self, st: KernelState, self_lhs: frozenset[Any]) -> int:
        """Intern the context of this column as seen by items it starts with lhs in `self_lhs`.

        Only waiters that such items (and, transitively, the waiters they
        complete) can ever reach are kept: the rest of the column (for example
        how many optional spaces came before a value) cannot matter any more,
        and keeping it would split identical futures into different states.
        """
        lhss = self._pd_lhs
        kept: list[tuple[int, int]] = []
        done: set[int] = set()
        todo = list(self_lhs)
        while todo:
            nt = todo.pop()
            if nt in done:
                continue
            done.add(nt)
            for wpd, worg in st.waiting.get(nt, ()):
                kept.append((wpd, worg))
                if worg == _SELF:
                    todo.append(lhss[wpd])
        key = frozenset(kept)
        cid = self._ctx_ids.get(key)
        if cid is None:
            cid = len(self._ctxs)
            self._ctx_ids[key] = cid
            by_nt: dict[int, list[tuple[int, int]]] = {}
            for wpd, worg in key:
                by_nt.setdefault(self._pd_sym[wpd], []).append((wpd, cid if worg == _SELF else worg))
            self._ctxs.append({nt: tuple(v) for nt, v in by_nt.items()})
        return cid

    # ------------------------------------------------------------ transitions

    def _scan(self, sid: int, st: KernelState, cp: int) -> int:
        charsets = self._charsets
        return self._advance(sid, st, [(pd, org) for ci, pd, org in st.scan if cp in charsets[ci]])

    def _plan(self, charset_ids: tuple[int, ...]) -> "_ScanPlan":
        """How each byte splits the items expecting `charset_ids` (cached: depends only on the sets)."""
        plan = self._plans.get(charset_ids)
        if plan is None:
            plan = _ScanPlan.build([self._charsets[ci] for ci in charset_ids])
            self._plans[charset_ids] = plan
        return plan

    def _entry(self, sid: int, byte: int) -> int:
        """transition[sid, byte], computing it (and the bytes that share its outcome) if unknown.

        Rows are built lazily: the first touch of a state marks every byte no
        item can start with as DEAD, then each group of bytes with the same
        outcome (one ASCII class, one lead byte...) is computed when first asked
        for, so a cold recognizer pays only for the bytes it actually reads.
        Caller holds the lock.
        """
        if not self._skeleton[sid]:
            self._build_skeleton(sid)
        value = self._trans.item(sid, byte)
        if value != UNKNOWN:
            return value
        st = self._states[sid]
        if isinstance(st, KernelState):
            plan = self._plan(tuple(ci for ci, _, _ in st.scan))
            if byte < 0x80:
                match, byte_list = plan.ascii_groups[plan.ascii_group_of[byte]]
                nxt = self._advance(sid, st, [(pd, org) for i, (_, pd, org) in enumerate(st.scan) if (match >> i) & 1])
                self._trans[sid, byte_list] = nxt
                return nxt
            _, match, lo, hi, remaining = plan.leads[plan.lead_of[byte]]
            if match:
                target = self._advance(sid, st, [(pd, org) for i, (_, pd, org) in enumerate(st.scan) if (match >> i) & 1])
                nxt = DEAD if target == DEAD else self._intern_partial_resolved(target, remaining)
            else:
                nxt = self._exact_partial(sid, lo, hi, remaining)
        elif isinstance(st, ExactPartialState):
            nxt = DEAD
            shift = 6 * (st.remaining - 1)
            v = ((st.lo >> (6 * st.remaining)) << 6) | (byte & 0x3F)
            lo = max(v << shift, st.lo)
            hi = min(((v + 1) << shift) - 1, st.hi)
            if lo <= hi:
                base = cast(KernelState, self._states[st.base])  # partial states hang off kernel states
                if st.remaining == 1:
                    nxt = self._scan(st.base, base, lo)
                else:
                    nxt = self._make_partial(st.base, base, lo, hi, st.remaining - 1)
        else:  # resolved partial states have complete skeletons
            raise InternalError(f"unknown transition from state {sid} of kind {type(st).__name__}")
        self._trans[sid, byte] = nxt
        return nxt

    def _build_skeleton(self, sid: int) -> None:
        st = self._states[sid]
        row = np.zeros(256, dtype=np.int32)
        if isinstance(st, KernelState):
            if st.scan:
                plan = self._plan(tuple(ci for ci, _, _ in st.scan))
                for _, byte_list in plan.ascii_groups:
                    row[byte_list] = UNKNOWN
                for lead in plan.leads:
                    row[lead[0]] = UNKNOWN
        elif isinstance(st, ResolvedPartialState):
            row[0x80:0xC0] = (
                st.target if st.remaining == 1 else self._intern_partial_resolved(st.target, st.remaining - 1)
            )
        elif isinstance(st, ExactPartialState):
            row[0x80:0xC0] = UNKNOWN
        self._trans[sid] = row  # after any growth done while computing
        self._skeleton[sid] = True

    def _make_partial(self, base_id: int, base: KernelState, lo: int, hi: int, remaining: int) -> int:
        plan = self._plan(tuple(ci for ci, _, _ in base.scan))
        kind, match = plan.classify(lo, hi, remaining)
        if kind == _PARTIAL_DEAD:
            return DEAD
        if kind == _PARTIAL_RESOLVED:
            items = [(pd, org) for i, (_, pd, org) in enumerate(base.scan) if (match >> i) & 1]
            target = self._advance(base_id, base, items)
            return DEAD if target == DEAD else self._intern_partial_resolved(target, remaining)
        return self._exact_partial(base_id, lo, hi, remaining)

    def _exact_partial(self, base_id: int, lo: int, hi: int, remaining: int) -> int:
        key = ("exact", base_id, lo, hi, remaining)
        pid = self._partial_ids.get(key)
        if pid is None:
            pid = self._new_state(ExactPartialState(base_id, lo, hi, remaining))
            self._partial_ids[key] = pid
        return pid

    def _intern_partial_resolved(self, target: int, remaining: int) -> int:
        key = ("resolved", target, remaining)
        pid = self._partial_ids.get(key)
        if pid is None:
            pid = self._new_state(ResolvedPartialState(target, remaining))
            self._partial_ids[key] = pid
        return pid
