"""Properties of the tokenizer over generated text (hypothesis, derandomized).

- byte-level BPE: the pieces of the ids of any text are exactly its UTF-8
  bytes, and vocabularies without llama.cpp's space clean-up decode back to
  the text;
- SentencePiece: decode(encode(x)) == x, and the ids equal a direct Python
  statement of llama.cpp's merge loop (the C++ code is optimised);
- arbitrary bytes (invalid UTF-8 included) never fail and never produce ids
  outside the vocabulary.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muser import _core

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VOCAB_DIR = FIXTURES / "reference" / "tokenizer"


def _load_reference_module():
    spec = importlib.util.spec_from_file_location("spm_reference", FIXTURES / "spm_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SentencePieceReference = _load_reference_module().SentencePieceReference

# Vocabularies with a token for every byte (falcon, mpt and starcoder lack a
# few, and llama.cpp then drops those bytes).
BYTE_LEVEL = ["gpt-2", "qwen2", "llama-bpe", "deepseek-llm", "deepseek-coder"]
NO_CLEANUP = ["qwen2", "deepseek-coder", "deepseek-llm"]

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True)

_cache: dict[str, object] = {}


def tokenizer(name: str):
    if name not in _cache:
        _cache[name] = _core.Tokenizer.from_file(str(VOCAB_DIR / f"ggml-vocab-{name}.gguf"))
    return _cache[name]


# Text that exercises the interesting paths: words, digits, punctuation,
# runs of whitespace, contractions, accents, CJK, emoji and other scripts.
WORDS = st.sampled_from(
    ["the", "The", "hello", "world", "don't", "I'm", "we'll", "naïve", "café", "東京", "日本語", "🚀", "😀😀",
     "1234567", "3.14", "x**2", "(a)", "--", "...", "\t", "\n", "\n\n", "   ", " ", "Здравствуй", "مرحبا",
     "नमस्ते", "ΑΒΓ", "ǅ", "\u00a0", "\u3000", "\u2028", "ﬀ", "𝔘𝔫𝔦"]
)
STRUCTURED = st.lists(st.one_of(WORDS, st.text(max_size=4)), max_size=12).map("".join)
ANY_TEXT = st.one_of(STRUCTURED, st.text(max_size=40))


@pytest.mark.parametrize("name", BYTE_LEVEL)
@SETTINGS
@given(text=ANY_TEXT)
def test_byte_level_pieces_reproduce_the_text(name, text):
    tok = tokenizer(name)
    ids = tok.encode(text, add_special=False)
    assert b"".join(tok.piece(i) for i in ids) == text.encode("utf-8")


@pytest.mark.parametrize("name", NO_CLEANUP)
@SETTINGS
@given(text=ANY_TEXT)
def test_decode_inverts_encode_without_cleanup(name, text):
    tok = tokenizer(name)
    assert tok.decode(tok.encode(text, add_special=False)) == text


@SETTINGS
@given(text=ANY_TEXT.filter(lambda s: "\u2581" not in s))
def test_sentencepiece_decode_inverts_encode(text):
    # U+2581 is SentencePiece's space mark: it decodes as a space, by design.
    tok = tokenizer("llama-spm")
    assert tok.decode(tok.encode(text, add_special=False)) == text


@pytest.fixture(scope="module")
def spm_reference():
    return SentencePieceReference(str(VOCAB_DIR / "ggml-vocab-llama-spm.gguf"))


@SETTINGS
@given(text=ANY_TEXT)
def test_sentencepiece_ids_equal_the_reference_merge_loop(spm_reference, text):
    tok = tokenizer("llama-spm")
    expected = spm_reference.encode_fragment(b" " + text.encode("utf-8")) if text else []
    assert tok.encode(text, add_special=False) == expected


def as_llama_cpp_reads(data: bytes) -> bytes:
    """The bytes llama.cpp's UTF-8 reader turns `data` into: well-formed
    sequences by their lead byte (overlong forms and surrogates included) are
    re-encoded canonically, any other byte becomes U+FFFD (muser also reads
    4-byte values past U+10FFFF as U+FFFD, where llama.cpp throws)."""
    out = bytearray()
    i, n = 0, len(data)

    def cont(k: int) -> bool:
        return i + k < n and data[i + k] & 0xC0 == 0x80

    while i < n:
        b0 = data[i]
        if b0 < 0x80:
            cp, size = b0, 1
        elif b0 & 0xE0 == 0xC0 and cont(1):
            cp, size = ((b0 & 0x1F) << 6) | (data[i + 1] & 0x3F), 2
        elif b0 & 0xF0 == 0xE0 and cont(1) and cont(2):
            cp, size = ((b0 & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F), 3
        elif b0 & 0xF8 == 0xF0 and cont(1) and cont(2) and cont(3):
            cp = ((b0 & 0x07) << 18) | ((data[i + 1] & 0x3F) << 12) | ((data[i + 2] & 0x3F) << 6) | (data[i + 3] & 0x3F)
            cp, size = (cp if cp <= 0x10FFFF else 0xFFFD), 4
        else:
            cp, size = 0xFFFD, 1
        out += chr(cp).encode("utf-8", "surrogatepass")
        i += size
    return bytes(out)


@pytest.mark.parametrize("name", ["gpt-2", "llama-spm", "qwen2"])
@SETTINGS
@given(data=st.one_of(st.binary(max_size=64), st.text(max_size=20).map(lambda t: t.encode("utf-8"))))
def test_arbitrary_bytes_never_fail(name, data):
    tok = tokenizer(name)
    ids = tok.encode(data, add_special=True, parse_special=True)
    assert all(0 <= i < tok.n_vocab for i in ids)
    tok.decode(ids, remove_special=False, unparse_special=True)
    pieces = b"".join(tok.piece(i) for i in tok.encode(data, add_special=False))
    if name == "llama-spm":
        # SentencePiece splits characters by lead byte only (a bad lead byte
        # can swallow the next bytes), so only well-formed text round-trips.
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return
        if b"\xe2\x96\x81" not in data:
            assert pieces == (b" " + data if data else b"")
    else:
        assert pieces == as_llama_cpp_reads(data)
