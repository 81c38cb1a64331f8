"""Property: streamed pieces joined equal decoding all tokens at once, for any split.

Checked on two real vocabularies (llama.cpp's SentencePiece and GPT-2 byte-level
BPE test vocabularies), with token sequences that mix random tokens, byte
tokens spelling multi-byte UTF-8 one byte at a time, control tokens and
invalid byte runs. "Decoding all at once" is written here independently:
join each visible token's bytes, drop one leading space from the first
token's piece for SentencePiece sequences, decode UTF-8 with U+FFFD.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gguf_vocab import CONTROL, UNKNOWN, Vocab, load_vocab
from muser.text import StreamingDetokenizer

VOCAB_NAMES = ["llama-spm", "gpt-2"]
pytestmark = pytest.mark.slow  # loading the vocabularies with the gguf package takes seconds


def decode_all_at_once(vocab: Vocab, tokens: list[int], special: bool, at_start: bool) -> str:
    pieces = []
    for token in tokens:
        kind = vocab.token_types[token]
        shown = kind in (1, 4, 6) or (special and kind in (UNKNOWN, CONTROL))
        pieces.append(vocab.token_bytes_special[token] if shown else b"")
    if at_start and vocab.add_space_prefix and pieces and pieces[0].startswith(b" "):
        pieces[0] = pieces[0][1:]
    return b"".join(pieces).decode("utf-8", errors="replace")


@st.composite
def token_runs(draw, vocab: Vocab) -> list[int]:
    """Token sequences rich in characters split across tokens."""
    parts: list[int] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["random", "spelled", "control", "bad-bytes"]))
        if kind == "random":
            parts += draw(st.lists(st.integers(0, len(vocab.token_types) - 1), max_size=8))
        elif kind == "spelled":  # text spelled byte by byte: multi-byte characters span tokens
            text = draw(st.text(min_size=1, max_size=6))
            parts += [vocab.byte_token[b] for b in text.encode("utf-8")]
        elif kind == "control":
            parts.append(draw(st.sampled_from(vocab.special_ids)))
        else:  # lone lead / continuation bytes and truncated sequences
            parts += [vocab.byte_token[b] for b in draw(st.lists(st.sampled_from([0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0xFF]), max_size=4))]
    return parts


@st.composite
def split_points(draw, length: int) -> list[int]:
    cuts = draw(st.lists(st.integers(0, length), max_size=6))
    return sorted(set(cuts))


@pytest.fixture(scope="module", params=VOCAB_NAMES)
def vocab(request) -> Vocab:
    return load_vocab(request.param)


def stream(vocab: Vocab, tokens: list[int], cuts: list[int], special: bool, at_start: bool) -> str:
    detok = StreamingDetokenizer(
        vocab.token_bytes_special if special else vocab.token_bytes,
        vocab.token_types,
        vocab.add_space_prefix,
        special=special,
        at_sequence_start=at_start,
    )
    out = []
    previous = 0
    for cut in [*cuts, len(tokens)]:
        out.append(detok.push_many(tokens[previous:cut]))
        previous = cut
    out.append(detok.flush())
    return "".join(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), special=st.booleans(), at_start=st.booleans())
def test_streamed_pieces_joined_equal_decoding_all_at_once(vocab, data, special, at_start):
    tokens = data.draw(token_runs(vocab))
    cuts = data.draw(split_points(len(tokens)))
    assert stream(vocab, tokens, cuts, special, at_start) == decode_all_at_once(vocab, tokens, special, at_start)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=20))
def test_text_spelled_in_byte_tokens_comes_back_exactly_and_never_broken(vocab, text):
    tokens = [vocab.byte_token[b] for b in text.encode("utf-8")]
    detok = StreamingDetokenizer(vocab.token_bytes, vocab.token_types, vocab.add_space_prefix, at_sequence_start=False)
    pieces = [detok.push(t) for t in tokens]
    assert all("\ufffd" not in p for p in pieces)  # valid text never shows a broken character
    assert "".join(pieces) + detok.flush() == text
