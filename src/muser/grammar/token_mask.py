"""Token masks: a byte trie over the vocabulary walked level by level with NumPy.

`TokenTrie(token_bytes)` is built once per vocabulary (`TokenTrie.for_vocabulary`
caches it by content). Its nodes are numbered breadth first and, within a
level, sorted by (parent, byte), so the children of a node are contiguous.

`allowed_tokens(trie, automaton, state)` walks the trie from a recognizer state:
each level looks up `transition[parent_state, byte]` for the children of the
nodes still alive, in one vectorized gather. The walk is pruned by what the
recognizer allows next: a dead prefix is never expanded (levels with few live
parents are walked sparsely; busy levels are gathered whole, where dead parents
cost nothing). Transitions the recognizer has not computed yet are computed in
one batch per level. Results are cached per (trie, state) in the automaton, so
a state seen before (in this or an earlier generation) costs a lookup.

`accepts_token(trie, automaton, state, token_id)` is the check-only fast path:
a few table reads for one token.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Sequence, cast

import numpy as np

from muser.grammar.automaton import DEAD, UNKNOWN, Automaton

if TYPE_CHECKING:
    from muser.grammar.recognizer import GrammarState


_TRIE_SERIALS = itertools.count(1)


class TokenTrie:
    """A byte trie over every token of a vocabulary.

    `token_bytes[i]` is the exact byte string token `i` produces (b"" for tokens
    that never produce text under a grammar, e.g. control tokens: they are never
    allowed by the byte walk). Immutable after construction; safe to share
    between threads.
    """

    def __init__(self, token_bytes: Sequence[bytes]):
        self.serial = next(_TRIE_SERIALS)  # distinguishes tries in per-state mask caches
        n = len(token_bytes)
        self.n_tokens = n
        self.token_bytes: tuple[bytes, ...] = tuple(bytes(t) for t in token_bytes)
        lens = np.fromiter((len(t) for t in self.token_bytes), dtype=np.int64, count=n)
        buf = np.frombuffer(b"".join(self.token_bytes) + b"\0", dtype=np.uint8)
        offsets = np.zeros(n, dtype=np.int64)
        if n:
            np.cumsum(lens[:-1], out=offsets[1:])
        order = np.argsort(-lens, kind="stable")
        sorted_lens = lens[order]
        sorted_offsets = offsets[order]
        neg_lens = -sorted_lens
        node = np.zeros(n, dtype=np.int64)
        parents: list[np.ndarray] = []
        byte_levels: list[np.ndarray] = []
        level_start = [0, 1]
        next_id = 1
        max_len = int(sorted_lens[0]) if n else 0
        for depth in range(max_len):
            alive = int(np.searchsorted(neg_lens, -depth, side="left"))  # tokens longer than depth
            keys = node[:alive] * 256 + buf[sorted_offsets[:alive] + depth]
            uniq, inverse = np.unique(keys, return_inverse=True)
            parents.append(uniq // 256)
            byte_levels.append((uniq % 256).astype(np.int64))
            node[:alive] = next_id + inverse.reshape(-1)
            next_id += len(uniq)
            level_start.append(next_id)
        self.n_nodes = next_id
        token_node = np.empty(n, dtype=np.int64)
        token_node[order] = node
        token_node[lens == 0] = -1
        self.token_node = token_node
        self.tokens_with_node = np.flatnonzero(token_node >= 0)
        self.level_start = level_start
        parent = np.zeros(self.n_nodes, dtype=np.int64)
        node_byte = np.zeros(self.n_nodes, dtype=np.int64)
        for depth, (p, b) in enumerate(zip(parents, byte_levels)):
            parent[level_start[depth + 1] : level_start[depth + 2]] = p
            node_byte[level_start[depth + 1] : level_start[depth + 2]] = b
        self.parent = parent
        self.node_byte = node_byte
        # children of node i are child_start[i] .. child_start[i] + child_count[i] - 1
        child_count = np.bincount(parent[1:], minlength=self.n_nodes).astype(np.int64)
        child_start = np.zeros(self.n_nodes, dtype=np.int64)
        if self.n_nodes > 1:
            first_child = np.searchsorted(parent[1:], np.arange(self.n_nodes), side="left") + 1
            child_start[:] = first_child
        self.child_count = child_count
        self.child_start = child_start
        # index of each node's parent within the parent's level
        parent_local = np.zeros(self.n_nodes, dtype=np.int64)
        for depth in range(max_len):
            lo, hi = level_start[depth + 1], level_start[depth + 2]
            parent_local[lo:hi] = parent[lo:hi] - level_start[depth]
        self.parent_local = parent_local
        # tokens ending at each node (several tokens may share their bytes)
        with_node = np.flatnonzero(token_node >= 0)
        by_node = np.argsort(token_node[with_node], kind="stable")
        self.node_tokens = with_node[by_node]
        self.node_token_start = np.searchsorted(token_node[with_node][by_node], np.arange(self.n_nodes + 1))
        self.max_depth = max_len
        self._lookup: dict[bytes, tuple[int, ...]] | None = None
        self._lookup_lock = threading.Lock()

    def tokens_at(self, nodes: np.ndarray) -> np.ndarray:
        """Ids of the tokens whose bytes end exactly at `nodes`."""
        starts = self.node_token_start[nodes]
        counts = self.node_token_start[nodes + 1] - starts
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64)
        ends = np.cumsum(counts)
        index = np.repeat(starts - (ends - counts), counts) + np.arange(total)
        return self.node_tokens[index]

    def mask(self, state: "GrammarState") -> np.ndarray:
        """`(n_tokens,) bool`: the tokens whose bytes `state` accepts next (see `allowed_tokens`)."""
        return allowed_tokens(self, state.automaton, state.state_id)

    def accepts_token(self, state: "GrammarState", token_id: int) -> bool:
        """Whether `state` accepts the bytes of `token_id` next (the check-only fast path)."""
        return accepts_token(self, state.automaton, state.state_id, token_id)

    # ---------------------------------------------------------------- cache

    @classmethod
    def for_vocabulary(cls, token_bytes: "Sequence[bytes] | TokenTrie") -> "TokenTrie":
        """The trie for this vocabulary, built on first use and cached (by content).

        Thread safe. Pass the same (unmodified) sequence each time: it is matched by
        identity first, then by a digest of its contents.
        """
        return _TRIE_CACHE.get(token_bytes)

    def ids_with_bytes(self, data: bytes) -> tuple[int, ...]:
        """Every token id whose bytes equal `data` (for `<text>` token terminals)."""
        with self._lookup_lock:
            if self._lookup is None:
                lookup: dict[bytes, list[int]] = {}
                for i, t in enumerate(self.token_bytes):
                    if t:
                        lookup.setdefault(t, []).append(i)
                self._lookup = {k: tuple(v) for k, v in lookup.items()}
            return self._lookup.get(data, ())


def _digest(token_bytes: Sequence[bytes]) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    lens = np.fromiter((len(t) for t in token_bytes), dtype=np.int64, count=len(token_bytes))
    h.update(lens.tobytes())
    h.update(b"".join(token_bytes))
    return h.digest()


class _TrieCache:
    """A few recently used tries, keyed by vocabulary content. Internally locked."""

    def __init__(self, max_entries: int):
        self._max = max_entries
        self._lock = threading.Lock()
        self._by_digest: OrderedDict[bytes, tuple[object, TokenTrie]] = OrderedDict()

    def get(self, token_bytes: Sequence[bytes] | TokenTrie) -> TokenTrie:
        if isinstance(token_bytes, TokenTrie):
            return token_bytes
        with self._lock:
            for digest, (source, trie) in self._by_digest.items():
                if source is token_bytes and len(token_bytes) == trie.n_tokens:
                    self._by_digest.move_to_end(digest)
                    return trie
        digest = _digest(token_bytes)
        with self._lock:
            hit = self._by_digest.get(digest)
            if hit is not None:
                self._by_digest.move_to_end(digest)
                return hit[1]
        trie = TokenTrie(token_bytes)  # built outside the lock: it can take a second
        with self._lock:
            self._by_digest[digest] = (token_bytes, trie)
            while len(self._by_digest) > self._max:
                self._by_digest.popitem(last=False)
        return trie


_TRIE_CACHE = _TrieCache(max_entries=4)


def _expand_children(trie: TokenTrie, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(children of `nodes`, index into `nodes` of each child's parent)."""
    counts = trie.child_count[nodes]
    total = int(counts.sum())
    if total == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    owner = np.repeat(np.arange(len(nodes)), counts)
    ends = np.cumsum(counts)
    offset_within = np.arange(total) - np.repeat(ends - counts, counts)
    children = trie.child_start[nodes][owner] + offset_within
    return children, owner


def _lookup(automaton: Automaton, parent_states: np.ndarray, flat_index: np.ndarray) -> np.ndarray:
    """transition[parent_state, byte] for every entry, filling unknown rows first."""
    nxt: np.ndarray = automaton.table.reshape(-1)[flat_index]
    unknown = nxt == UNKNOWN
    if unknown.any():
        automaton.fill_entries(parent_states[unknown], flat_index[unknown] & 0xFF)
        nxt[unknown] = automaton.table.reshape(-1)[flat_index[unknown]]
    return nxt


def allowed_tokens(trie: TokenTrie, automaton: Automaton, sid: int) -> np.ndarray:
    """`(n_tokens,) bool`: tokens whose bytes the recognizer accepts from state `sid`.

    Only the byte walk: token-level terminals and end-of-generation are the
    caller's business (GrammarConstraint). A token may end inside a UTF-8
    character; it is allowed when that prefix can still be completed.
    Results are cached per (trie, state) in the automaton (shared, bounded by
    bytes, kept compact: the allowed ids when they are few, else packed bits),
    so a state seen before costs a lookup and an unpack. Returns a new array.
    """
    key = (trie.serial, sid)
    cached = automaton.cached_mask(key)
    if cached is not None:
        return _expand_mask(cast("tuple[str, np.ndarray]", cached), trie.n_tokens)
    mask = _walk(trie, automaton, sid)
    allowed = np.flatnonzero(mask)
    if len(allowed) * 32 < trie.n_tokens:
        compact: tuple[str, np.ndarray] = ("ids", allowed.astype(np.int32))
        nbytes = compact[1].nbytes
    else:
        compact = ("bits", np.packbits(mask))
        nbytes = compact[1].nbytes
    automaton.store_mask(key, compact, nbytes)
    return mask


def _expand_mask(compact: tuple[str, np.ndarray], n_tokens: int) -> np.ndarray:
    kind, data = compact
    if kind == "ids":
        mask = np.zeros(n_tokens, dtype=bool)
        mask[data] = True
        return mask
    return np.unpackbits(data, count=n_tokens).view(bool)


def _walk(trie: TokenTrie, automaton: Automaton, sid: int) -> np.ndarray:
    """The trie walk behind `allowed_tokens`.

    Each trie level costs a few vectorized gathers. A level is processed whole
    ("dense") when many of its parents are alive (dead parents map to the dead
    state for free), or only below the live parents ("sparse") when they are few.
    """
    level_start = trie.level_start
    live_nodes = np.zeros(1, dtype=np.int64)  # sparse form of the current level
    live_states = np.array([sid], dtype=np.int64)
    dense_states: np.ndarray | None = None  # dense form (one entry per node of the level)
    node_alive = np.zeros(trie.n_nodes, dtype=bool)
    n_alive_total = 0
    n_alive = 1
    for depth in range(trie.max_depth):
        if n_alive == 0:
            break
        prev_start = level_start[depth]
        start, end = level_start[depth + 1], level_start[depth + 2]
        if n_alive * 4 < end - start:
            if dense_states is not None:
                local = np.flatnonzero(dense_states)
                live_nodes = local + prev_start
                live_states = dense_states[local].astype(np.int64)
                dense_states = None
            children, owner = _expand_children(trie, live_nodes)
            if len(children) == 0:
                break
            parent_states = live_states[owner]
            nxt = _lookup(automaton, parent_states, parent_states * 256 + trie.node_byte[children])
            keep = nxt != DEAD
            live_nodes = children[keep]
            live_states = nxt[keep].astype(np.int64)
            node_alive[live_nodes] = True
            n_alive = len(live_nodes)
        else:
            if dense_states is None:
                dense_states = np.zeros(start - prev_start, dtype=np.int64)
                dense_states[live_nodes - prev_start] = live_states
            parent_states = dense_states[trie.parent_local[start:end]]
            index = np.left_shift(parent_states, 8)
            index |= trie.node_byte[start:end]
            dense_states = _lookup(automaton, parent_states, index).astype(np.int64)
            alive_here = dense_states != DEAD
            node_alive[start:end] = alive_here
            n_alive = int(np.count_nonzero(alive_here))
        n_alive_total += n_alive
    if n_alive_total * 8 < trie.n_tokens:
        mask = np.zeros(trie.n_tokens, dtype=bool)
        mask[trie.tokens_at(np.flatnonzero(node_alive))] = True
        return mask
    mask = np.zeros(trie.n_tokens, dtype=bool)
    mask[trie.tokens_with_node] = node_alive[trie.token_node[trie.tokens_with_node]]
    return mask


def accepts_token(trie: TokenTrie, automaton: Automaton, sid: int, token_id: int) -> bool:
    """Whether the bytes of `token_id` are accepted from state `sid` (check-only path)."""
    data = trie.token_bytes[token_id]
    if not data:
        return False
    table = automaton.table
    for byte in data:
        nxt = table.item(sid, byte) if sid < table.shape[0] else UNKNOWN
        if nxt == UNKNOWN:
            nxt = automaton.step(sid, byte)
            table = automaton.table
        if nxt == DEAD:
            return False
        sid = nxt
    return True

