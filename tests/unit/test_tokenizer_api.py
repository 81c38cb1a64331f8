"""Behaviour of _core.Tokenizer on llama.cpp's vocabulary-only GGUF files:
special tokens, detokenization rules, pieces, types and bad input."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from muser import _core

VOCAB_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "tokenizer"


def load(name: str):
    return _core.Tokenizer.from_file(str(VOCAB_DIR / f"ggml-vocab-{name}.gguf"))


@pytest.fixture(scope="module")
def spm():
    return load("llama-spm")


@pytest.fixture(scope="module")
def llama3():
    return load("llama-bpe")


@pytest.fixture(scope="module")
def gpt2():
    return load("gpt-2")


def test_sentencepiece_vocabulary_properties(spm):
    assert (spm.n_vocab, spm.model, spm.pre) == (32000, "llama", "default")
    assert (spm.bos_id, spm.eos_id, spm.unk_id, spm.eot_id) == (1, 2, 0, -1)
    assert (spm.add_bos, spm.add_eos, spm.add_space_prefix) == (True, False, True)
    assert spm.eog_ids == [2]


def test_opening_from_a_gguf_file_object_equals_from_file(spm):
    tok = _core.Tokenizer(_core.GgufFile.open(str(VOCAB_DIR / "ggml-vocab-llama-spm.gguf")))
    assert tok.encode("Hello world") == spm.encode("Hello world")


def test_add_special_adds_bos_when_the_vocabulary_asks(spm, gpt2):
    assert spm.encode("Hello") == [1] + spm.encode("Hello", add_special=False)
    assert spm.encode("") == [1]
    assert spm.encode("", add_special=False) == []
    assert not gpt2.add_bos
    assert gpt2.encode("Hello") == gpt2.encode("Hello", add_special=False)


def test_llama3_pre_tokenizer_adds_bos_by_default(llama3):
    # The GGUF has no add_bos_token key; llama.cpp's llama3 family defaults to adding it.
    assert llama3.add_bos and llama3.bos_id == 128000
    assert llama3.encode("hi")[0] == 128000


def test_control_tokens_are_recognised_only_with_parse_special(llama3):
    assert llama3.encode("<|eot_id|>", add_special=False, parse_special=True) == [128009]
    plain = llama3.encode("<|eot_id|>", add_special=False)
    assert 128009 not in plain and len(plain) > 1
    assert llama3.decode(plain) == "<|eot_id|>"


def test_user_defined_tokens_are_recognised_without_parse_special():
    tok = load("deepseek-coder")
    assert tok.token_types()[32000] == 4
    assert tok.encode("\u00f5", add_special=False) == [32000]


def test_end_of_generation_ids(llama3, gpt2):
    assert llama3.eog_ids == [128001, 128009]
    assert llama3.is_eog(128009) and not llama3.is_eog(128000)
    assert gpt2.eog_ids == [50256]


def test_control_pieces_are_empty_unless_special(spm):
    assert spm.piece(1) == b""
    assert spm.piece(1, special=True) == b"<s>"
    assert spm.token_bytes()[1] == b""
    assert spm.token_bytes(special=True)[1] == b"<s>"


def test_sentencepiece_pieces_turn_the_space_mark_into_a_space(spm):
    ids = spm.encode("Hello world", add_special=False)
    assert b"".join(spm.piece(i) for i in ids) == b" Hello world"
    assert spm.token_text(ids[0]) == "\u2581Hello".encode()


def test_byte_tokens_contribute_their_byte(spm):
    assert spm.token_types()[13] == 6 and spm.token_text(13) == b"<0x0A>"
    assert spm.piece(13) == b"\n"


def test_token_types_follow_gguf_numbering(spm):
    types = spm.token_types()
    assert len(types) == spm.n_vocab
    assert types[:3] == [2, 3, 3]  # <unk>, <s>, </s>
    assert types[3] == 6 and types[1000] == 1


def test_decode_drops_bos_but_keeps_its_leading_space_like_llama_cpp(spm):
    ids = spm.encode("Hello")
    assert ids == [1, 15043]
    # llama_detokenize strips the SentencePiece prefix space only when the
    # text does not start with a removed BOS.
    assert spm.decode(ids) == " Hello"
    assert spm.decode(ids[1:]) == "Hello"
    assert spm.decode(ids, remove_special=False, unparse_special=True) == "<s> Hello"
    assert spm.decode(ids, remove_special=False) == " Hello"


def test_gpt2_detokenizer_cleans_up_spaces_before_punctuation(gpt2):
    ids = gpt2.encode("Hello , world ! it 's", add_special=False)
    assert gpt2.decode(ids) == "Hello, world! it's"
    assert gpt2.decode_bytes(ids) == b"Hello, world! it's"
    assert b"".join(gpt2.piece(i) for i in ids) == b"Hello , world ! it 's"


def test_qwen2_detokenizer_does_not_clean_up():
    tok = load("qwen2")
    assert tok.decode(tok.encode("Hello , world !", add_special=False)) == "Hello , world !"


def test_invalid_utf8_input_is_read_as_llama_cpp_reads_it(spm, gpt2):
    # Byte-level BPE sees U+FFFD for the bad byte; SentencePiece keeps the raw byte.
    ids = gpt2.encode(b"a\xffb", add_special=False)
    assert [gpt2.piece(i) for i in ids] == [b"a", "\ufffd".encode(), b"b"]
    ids = spm.encode(b"\xff", add_special=False)
    assert spm.token_text(ids[-1]) == b"<0xFF>"
    assert spm.decode_bytes(ids) == b"\xff"
    assert spm.decode(ids) == "\ufffd"


def test_decode_rejects_ids_outside_the_vocabulary(spm):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        spm.decode([1, 32000])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        spm.decode([-1])
    with pytest.raises(ValueError):
        spm.piece(40000)


def test_encode_accepts_only_text(spm):
    with pytest.raises(TypeError):
        spm.encode(123)
    with pytest.raises(UnicodeEncodeError):
        spm.encode("\ud800")  # a lone surrogate has no UTF-8 form


def test_concurrent_encoding_gives_the_same_ids(llama3):
    texts = [f"Thread {i}: the quick brown fox jumps over the lazy dog {i * 7919}." * 50 for i in range(16)]
    expected = [llama3.encode(t) for t in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(llama3.encode, texts))
    assert got == expected


@pytest.mark.parametrize("tail", ["1", "a", ""])
def test_long_whitespace_runs_tokenize_in_linear_time(tail):
    # deepseek-llm's "\s+$" pre-tokenizer pattern backtracks quadratically on a
    # long run of spaces followed by a digit; muser searches it directly (a
    # quadratic search would exceed the step budget and raise here).
    tok = load("deepseek-llm")
    text = " " * 200_000 + tail
    ids = tok.encode(text, add_special=False)
    assert b"".join(tok.piece(i) for i in ids) == text.encode()


def test_phi3_special_tokens_swallow_the_whitespace_after_them():
    # llama.cpp gives every special token of a model named "phi3" the rstrip
    # attribute; the text after a special token gets the SentencePiece space prefix.
    tok = load("phi-3")
    ids = tok.encode("<|user|>\nHi<|end|>\n<|assistant|>", add_special=False, parse_special=True)
    assert [tok.token_text(i) for i in ids] == [b"<|user|>", "\u2581Hi".encode(), b"<|end|>", b"<|assistant|>"]
