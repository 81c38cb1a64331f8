"""The streaming detokenizer's invariant on the real vocabularies, through
muser's own tokenizer: the streamed pieces joined equal decoding all tokens at
once, for any tokens and any split, and every piece is complete text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import muser
from muser.text.detokenizer import StreamingDetokenizer

TEXTS = ["naïve café — 東京 🚀", "def f(x):\n    return x**2", "Ünïcödé ✓ ∑ 𝔘", "plain words here"]


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def engine(request, real_model_path):
    return muser.Engine(real_model_path(request.param), threads=1)


def _token_strategy(engine):
    # Random ids (byte tokens and control tokens included) mixed with the
    # tokens of texts whose characters span several tokens.
    n_vocab = engine.n_vocab
    texts = [engine.tokenize(t, add_special=False) for t in TEXTS]
    return st.lists(st.one_of(st.integers(0, n_vocab - 1), st.sampled_from(texts).map(tuple)), max_size=12).map(
        lambda parts: [t for p in parts for t in (p if isinstance(p, tuple) else (p,))])


def _stream_in_pieces(engine, tokens: list[int], data) -> list[str]:
    """Push `tokens` through a fresh streaming detokenizer in drawn pieces; the
    texts it emitted, the flush last."""
    token_bytes, token_types = engine.vocabulary()
    detok = StreamingDetokenizer(token_bytes, token_types, engine.tokenizer.add_space_prefix, at_sequence_start=True)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(tokens))), label="cuts"))
    pieces, at = [], 0
    for cut in cuts + [len(tokens)]:
        pieces.append(detok.push_many(tokens[at:cut]))
        at = cut
    pieces.append(detok.flush())
    return pieces


@pytest.mark.slow
@pytest.mark.real_model
@settings(max_examples=60)
@given(data=st.data())
def test_streamed_pieces_joined_equal_decoding_everything_at_once(engine, data):
    tokens = data.draw(_token_strategy(engine), label="tokens")
    pieces = _stream_in_pieces(engine, tokens, data)
    assert "".join(pieces) == engine.detokenize(tokens)


@pytest.mark.slow
@pytest.mark.real_model
@settings(max_examples=40)
@given(data=st.data())
def test_text_split_inside_characters_is_never_emitted_broken(engine, data):
    text = data.draw(st.sampled_from(TEXTS), label="text")
    tokens = engine.tokenize(text, add_special=False)
    pieces = _stream_in_pieces(engine, tokens, data)
    assert all("\ufffd" not in piece for piece in pieces)  # only complete characters come out
    assert "".join(pieces) == text
