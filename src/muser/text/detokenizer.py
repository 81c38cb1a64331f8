"""Streaming detokenizer: token ids in, only complete UTF-8 text out.

Written invariant (tested as a property on real vocabularies): for any token
sequence and any way of splitting it into pushes, the pushed pieces joined
with ``flush()`` equal decoding the whole sequence at once, where "decoding" is
llama.cpp's detokenization rule:

- each token contributes its bytes (``token_bytes[id]``), except tokens whose
  type is hidden: control (3) and unknown (2) tokens unless ``special=True``,
  and undefined (0) / unused (5) tokens always;
- with ``add_space_prefix`` (SentencePiece), one leading space is removed from
  the piece of the first token of a sequence (a sequence starting with a hidden
  BOS therefore keeps its spaces, as in llama.cpp);
- the bytes are decoded as UTF-8, invalid sequences becoming U+FFFD.

A multi-byte character split across tokens (byte-fallback tokens, byte-level
BPE) is held back until it is complete, so a stream never emits a broken
character.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["StreamingDetokenizer", "DetokenizerState", "VISIBLE_TOKEN_TYPES", "SPECIAL_TOKEN_TYPES"]

#: GGUF token types always shown: normal (1), user-defined (4), byte (6).
VISIBLE_TOKEN_TYPES = frozenset({1, 4, 6})
#: GGUF token types shown only with ``special=True``: unknown (2), control (3).
SPECIAL_TOKEN_TYPES = frozenset({2, 3})

_SPACE = b" "


@dataclass(frozen=True)
class DetokenizerState:
    """Snapshot of a stream: undecoded bytes, decoder flag, and whether the
    leading-space rule is still pending."""

    pending: bytes
    decoder_flag: int
    strip_pending: bool


class StreamingDetokenizer:
    """Turns token ids into text incrementally.

    Args:
        token_bytes: the bytes each token contributes mid-text, indexed by id
            (SentencePiece U+2581 already a space, ``<0xXX>`` byte tokens already
            their byte, GPT-2 byte-level already decoded). To be able to show
            special tokens, pass the variant that includes their text.
        token_types: GGUF token type per id (1 normal, 2 unknown, 3 control,
            4 user-defined, 5 unused, 6 byte).
        add_space_prefix: the vocabulary's SentencePiece ``add_space_prefix`` flag.
        special: show control and unknown tokens' text.
        at_sequence_start: the first pushed token starts the sequence (so the
            leading-space rule applies). Pass False when streaming a continuation,
            e.g. generated tokens after a prompt.

    Thread safety: one stream per request; not synchronized. The vocabulary
    sequences are only read and may be shared between streams.
    Failure: ``ValueError`` for an out-of-range token id (nothing is consumed)
    or mismatched vocabulary lengths.
    """

    __slots__ = ("_token_bytes", "_token_types", "_add_space_prefix", "_visible", "_at_start", "_decoder", "_strip")

    def __init__(
        self,
        token_bytes: Sequence[bytes],
        token_types: Sequence[int],
        add_space_prefix: bool,
        *,
        special: bool = False,
        at_sequence_start: bool = True,
    ) -> None:
        if len(token_bytes) != len(token_types):
            raise ValueError(
                f"token_bytes has {len(token_bytes)} entries but token_types has {len(token_types)}"
            )
        self._token_bytes = token_bytes
        self._token_types = token_types
        self._add_space_prefix = bool(add_space_prefix)
        self._visible = VISIBLE_TOKEN_TYPES | SPECIAL_TOKEN_TYPES if special else VISIBLE_TOKEN_TYPES
        self._at_start = bool(at_sequence_start)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._strip = self._at_start and self._add_space_prefix

    @property
    def n_vocab(self) -> int:
        return len(self._token_bytes)

    def piece(self, token_id: int) -> bytes:
        """The bytes ``token_id`` contributes mid-sequence (empty if hidden)."""
        if not 0 <= token_id < len(self._token_bytes):
            raise ValueError(f"token id {token_id} is out of range [0, {len(self._token_bytes)})")
        if self._token_types[token_id] not in self._visible:
            return b""
        return self._token_bytes[token_id]

    def push(self, token_id: int) -> str:
        """Add one token; return the text that became complete (maybe empty)."""
        piece = self.piece(int(token_id))
        if self._strip:
            # llama.cpp strips at most one space, from the first token only, even
            # when that token shows nothing (a hidden BOS ends the rule).
            self._strip = False
            if piece.startswith(_SPACE):
                piece = piece[1:]
        return self._decoder.decode(piece, final=False)

    def push_many(self, token_ids: Iterable[int]) -> str:
        """Add several tokens; return the text that became complete."""
        return "".join(self.push(token_id) for token_id in token_ids)

    def flush(self) -> str:
        """End of stream: return what is held back (an incomplete character
        becomes U+FFFD). The stream can then continue as a new sequence."""
        text = self._decoder.decode(b"", final=True)
        self._decoder.reset()
        return text

    @property
    def pending(self) -> bytes:
        """Bytes held back because they do not yet form a complete character."""
        return self._decoder.getstate()[0]

    def reset(self) -> None:
        """Forget held bytes and start over as constructed."""
        self._decoder.reset()
        self._strip = self._at_start and self._add_space_prefix

    def snapshot(self) -> DetokenizerState:
        pending, flag = self._decoder.getstate()
        return DetokenizerState(pending=pending, decoder_flag=flag, strip_pending=self._strip)

    def restore(self, state: DetokenizerState) -> None:
        if not isinstance(state, DetokenizerState):
            raise TypeError(f"expected DetokenizerState, got {type(state).__name__}")
        self._decoder.setstate((state.pending, state.decoder_flag))
        self._strip = state.strip_pending
