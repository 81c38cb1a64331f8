"""`GrammarConstraint`: how a grammar plugs into token sampling.

Sampler protocol
----------------
One `GrammarConstraint` per generation (slot), made from an immutable `Grammar`,
the vocabulary's `token_bytes` (token id -> the exact bytes it produces; b"" for
tokens that must never be produced under a grammar, e.g. control tokens) and the
end-of-generation ids::

    gc = grammar.constraint(token_bytes, eog_ids)     # or GrammarConstraint(...)
    for each step:
        logits = session.logits                       # (n_vocab,) float32
        tok = sample(logits)                          # the normal chain, no grammar
        if not gc.check(tok):                         # fast path: microseconds
            gc.apply(logits)                          # full mask: disallowed -> -inf
            tok = sample(logits)                      # resample from the masked logits
        gc.accept(tok)                                # advance (raises if not allowed)
        if tok in eog_ids: break                      # accept() of an EOG id ends it

- `check(token_id) -> bool` never changes state. `mask() -> (n_vocab,) bool` is
  the set of allowed ids (read-only array, cached per recognizer state);
  `apply(logits)` writes -inf into every disallowed entry in place (entries past
  the vocabulary size are disallowed too).
- An end-of-generation id is allowed exactly where the grammar can end
  (`can_end()`); accepting it marks the constraint `finished`, after which
  nothing is allowed. Token terminals (`<[id]>`, `!<[id]>`) never admit EOG ids.
- `clone()` is O(1) (for speculation/beam-like uses); `reset()` restarts.
- The check-first path samples from the chain's distribution restricted by
  rejection (as llama.cpp's default does) and uses one extra draw when a token
  is rejected. Call `apply` before sampling for exact masked sampling.

Thread safety: one constraint per generation, used by one thread at a time;
several constraints over the same Grammar and vocabulary may run concurrently.
Failure: `accept` of a disallowed token raises `GrammarError` and leaves the
constraint unchanged; a `<text>` token terminal that names no token of the
vocabulary raises `GrammarError` at construction.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from muser.errors import GrammarError
from muser.grammar.automaton import KernelState
from muser.grammar.token_mask import TokenTrie, accepts_token, allowed_tokens

if TYPE_CHECKING:
    from muser.grammar.grammar import Grammar
    from muser.grammar.recognizer import GrammarState

# masks of recently visited recognizer states kept per constraint
_MASK_CACHE_SIZE = 32


class GrammarConstraint:
    """Grammar state for one generation, speaking in token ids. See the module docstring.

    It provides `check`, `apply` and `accept`, the hook `muser.sampling`'s
    SamplerChain expects, plus `mask`, `can_end`, `finished`, `clone`, `reset`.
    """

    def __init__(
        self,
        grammar: "Grammar",
        token_bytes: Sequence[bytes] | TokenTrie,
        eog_ids: Iterable[int] = (),
    ):
        """`token_bytes[i]`: the bytes token `i` produces (or a prebuilt TokenTrie);
        `eog_ids`: end-of-generation token ids (ValueError if outside the vocabulary).

        The vocabulary trie is built once per vocabulary and cached (about 0.2 s
        for 49k tokens, 1 s for 262k); pass the same sequence object each time.
        """
        self.grammar = grammar
        self.trie = TokenTrie.for_vocabulary(token_bytes)
        n = self.trie.n_tokens
        eog = sorted({int(i) for i in eog_ids})
        for i in eog:
            if not 0 <= i < n:
                raise ValueError(f"end-of-generation id {i} is outside the vocabulary (0..{n - 1})")
        self.eog_ids = frozenset(eog)
        self._eog_array = np.array(eog, dtype=np.int64)
        self._terminals = self._resolve_token_terminals()
        self._state = grammar.state()
        self._finished = False
        # Token ids accepted since the start: the portable form of the position
        # (state ids depend on the order the lazy automaton met its states).
        self._accepted: list[int] = []
        # state id -> (mask, (allowed ids are few?, those ids or else the disallowed ones))
        self._mask_cache: OrderedDict[int, tuple[np.ndarray, tuple[bool, np.ndarray]]] = OrderedDict()

    def _resolve_token_terminals(self) -> tuple[tuple[frozenset[int], bool], ...]:
        out = []
        for term in self.grammar.flat.token_terminals:
            if term.token_id is not None:
                ids = frozenset({term.token_id})
            else:
                text = term.text or ""
                ids = frozenset(self.trie.ids_with_bytes(text.encode("utf-8")))
                if not ids:
                    raise GrammarError(
                        f"token terminal {text} is not a token of this vocabulary"
                    )
            out.append((ids, term.negated))
        return tuple(out)

    def _terminal_matches(self, term_index: int, token_id: int) -> bool:
        ids, negated = self._terminals[term_index]
        if token_id in self.eog_ids:
            return False
        return (token_id in ids) != negated

    # ---------------------------------------------------------------- queries

    @property
    def n_vocab(self) -> int:
        return self.trie.n_tokens

    @property
    def finished(self) -> bool:
        """True once an end-of-generation token was accepted."""
        return self._finished

    @property
    def state(self) -> GrammarState:
        """The underlying GrammarState (read it, don't advance it behind the constraint's back)."""
        return self._state

    def can_end(self) -> bool:
        """Whether an end-of-generation token is allowed now."""
        return not self._finished and self._state.can_end()

    def check(self, token_id: int) -> bool:
        """Whether `token_id` is allowed now (fast path; no state change)."""
        if self._finished or not 0 <= token_id < self.trie.n_tokens:
            return False
        if token_id in self.eog_ids:
            return self._state.can_end()
        sid = self._state.state_id
        auto = self._state.automaton
        if accepts_token(self.trie, auto, sid, token_id):
            return True
        st = auto.state(sid)
        if isinstance(st, KernelState) and st.tokens:
            return any(self._terminal_matches(t, token_id) for t, _, _ in st.tokens)
        return False

    def mask(self) -> np.ndarray:
        """`(n_vocab,) bool` of allowed token ids (read-only; shared per recognizer state)."""
        if self._finished:
            out = np.zeros(self.trie.n_tokens, dtype=bool)
            out.flags.writeable = False
            return out
        auto = self._state.automaton
        sid = self._state.state_id
        key = sid  # a constraint's state never changes automaton, so the id is enough
        cached = self._mask_cache.get(key)
        if cached is not None:
            self._mask_cache.move_to_end(key)
            return cached[0]
        mask = allowed_tokens(self.trie, auto, sid)
        st = auto.state(sid)
        if isinstance(st, KernelState) and st.tokens:
            for term, _, _ in st.tokens:
                ids, negated = self._terminals[term]
                idx = np.fromiter((i for i in ids if 0 <= i < len(mask)), dtype=np.int64)
                if negated:
                    keep = mask[idx].copy()
                    mask[:] = True
                    mask[idx] = keep
                else:
                    mask[idx] = True
        if len(self._eog_array):
            mask[self._eog_array] = self._state.can_end()
        mask.flags.writeable = False
        # apply() writes whichever side is smaller: the allowed or the disallowed ids
        allowed = np.flatnonzero(mask)
        fill = (True, allowed) if len(allowed) * 2 < len(mask) else (False, np.flatnonzero(~mask))
        self._mask_cache[key] = (mask, fill)
        if len(self._mask_cache) > _MASK_CACHE_SIZE:
            self._mask_cache.popitem(last=False)
        return mask

    def apply(self, logits: np.ndarray) -> None:
        """Set every disallowed entry of `logits` (1-D float array, length >= n_vocab) to -inf, in place."""
        if logits.ndim != 1 or logits.shape[0] < self.trie.n_tokens:
            raise ValueError(
                f"logits must be 1-D with at least {self.trie.n_tokens} entries, got shape {logits.shape}"
            )
        n = self.trie.n_tokens
        if self._finished:
            logits[:] = -np.inf
            return
        self.mask()
        _, (sparse, ids) = self._mask_cache[self._state.state_id]
        if sparse:
            keep = logits[ids]
            logits[:] = -np.inf
            logits[ids] = keep
        else:
            logits[ids] = -np.inf
            logits[n:] = -np.inf

    # ---------------------------------------------------------------- updates

    def accept(self, token_id: int) -> None:
        """Advance over `token_id`. Raises GrammarError (state unchanged) if it is not allowed."""
        if self._finished:
            raise GrammarError("the grammar already ended: no token may follow end-of-generation")
        if not 0 <= token_id < self.trie.n_tokens:
            raise GrammarError(f"token id {token_id} is outside the vocabulary (0..{self.trie.n_tokens - 1})")
        if token_id in self.eog_ids:
            if not self._state.can_end():
                raise GrammarError(f"end-of-generation token {token_id} is not allowed: the grammar cannot end here")
            self._finished = True
            self._accepted.append(token_id)
            return
        if not self._state.accept_token(token_id, self.trie.token_bytes[token_id], self._terminal_matches):
            raise GrammarError(
                f"token {token_id} ({self.trie.token_bytes[token_id]!r}) is not allowed by the grammar here"
            )
        self._accepted.append(token_id)

    def clone(self) -> "GrammarConstraint":
        """An independent copy at the same position (O(1); shares the caches)."""
        other = object.__new__(GrammarConstraint)
        other.grammar = self.grammar
        other.trie = self.trie
        other.eog_ids = self.eog_ids
        other._eog_array = self._eog_array
        other._terminals = self._terminals
        other._state = self._state.clone()
        other._finished = self._finished
        other._accepted = list(self._accepted)
        other._mask_cache = self._mask_cache.copy()
        return other

    def snapshot(self) -> tuple[int, ...]:
        """The token ids accepted since the start: a portable, immutable position
        (saved sessions store it; :meth:`restore` replays it)."""
        return tuple(self._accepted)

    def restore(self, accepted: Sequence[int]) -> None:
        """Return to the position after accepting ``accepted`` from the start.

        Raises GrammarError (and stays where it was) if the grammar refuses them.
        """
        backup = (self._state.clone(), self._finished, list(self._accepted))
        self.reset()
        try:
            for token in accepted:
                self.accept(int(token))
        except GrammarError:
            self._state, self._finished, self._accepted = backup
            raise

    def reset(self) -> None:
        """Back to the start of the grammar (keeps the vocabulary and caches)."""
        self._state.reset()
        self._finished = False
        self._accepted = []
