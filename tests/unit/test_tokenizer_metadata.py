"""Building a tokenizer from GGUF metadata: tiny hand-made vocabularies show
the merge rules, and malformed metadata raises ModelFormatError naming the key.

The files are written with the `gguf` package into pytest's tmp_path.
"""

from __future__ import annotations

import gguf
import pytest

from muser import ModelFormatError, _core

from tests.fixtures.gpt2_bytes import gpt2_byte_chars

GPT2_BYTE = dict(enumerate(gpt2_byte_chars()))  # byte -> its GPT-2 alphabet character


def write_vocab(path, kv: dict) -> str:
    """Write a vocabulary-only GGUF with exactly the given tokenizer keys."""
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in kv.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, tuple) and value[0] == "f32":
            w.add_key_value(key, list(value[1]), gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.FLOAT32)
        elif isinstance(value, tuple) and value[0] == "types":
            w.add_key_value(key, list(value[1]), gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32)
        else:
            w.add_array(key, list(value))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def byte_level_vocab(extra_tokens: list[str], merges: list[str], **kv) -> dict:
    """256 byte tokens + extra_tokens; an empty merge list becomes one
    harmless merge ("x y" -> "xy") because GGUF writers drop empty arrays."""
    tokens = [GPT2_BYTE[b] for b in range(256)] + extra_tokens
    if not merges:
        tokens.append("xy")
        merges = ["x y"]
    base = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": merges,
    }
    base.update(kv)
    return base


def sentencepiece_vocab(pieces: list[tuple[str, float, int]], **kv) -> dict:
    base = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [p for p, _, _ in pieces],
        "tokenizer.ggml.scores": ("f32", [s for _, s, _ in pieces]),
        "tokenizer.ggml.token_type": ("types", [t for _, _, t in pieces]),
    }
    base.update(kv)
    return base


def spm_pieces(words: list[tuple[str, float]]) -> list[tuple[str, float, int]]:
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    pieces += [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)]
    pieces += [(w, s, 1) for w, s in words]
    return pieces


def ids_of(tok, texts: list[str]) -> list[int]:
    table = {tok.token_text(i).decode("utf-8"): i for i in range(tok.n_vocab)}
    return [table[t] for t in texts]


# --- merge rules ------------------------------------------------------------


def test_bpe_applies_the_lowest_ranked_merge_first(tmp_path):
    # "b c" has rank 0, "a b" rank 1: "abc" becomes a + bc, not ab + c.
    kv = byte_level_vocab(["bc", "ab", "abc"], ["b c", "a b", "a bc"])
    tok = _core.Tokenizer.from_file(write_vocab(tmp_path / "v.gguf", kv))
    assert tok.encode("abc", add_special=False) == ids_of(tok, ["abc"])
    kv = byte_level_vocab(["bc", "ab"], ["b c", "a b"])
    tok = _core.Tokenizer.from_file(write_vocab(tmp_path / "w.gguf", kv))
    assert tok.encode("abc", add_special=False) == ids_of(tok, ["a", "bc"])


def test_bpe_writes_spaces_in_the_gpt2_byte_alphabet(tmp_path):
    kv = byte_level_vocab(["\u0120a"], ["\u0120 a"])
    tok = _core.Tokenizer.from_file(write_vocab(tmp_path / "v.gguf", kv))
    ids = tok.encode("a a", add_special=False)
    assert ids == ids_of(tok, ["a", "\u0120a"])
    assert tok.decode(ids) == "a a"


def test_sentencepiece_merges_the_highest_scoring_pair_first(tmp_path):
    # Both "ab" and "bc" are tokens; "bc" scores higher, so "abc" -> a + bc.
    pieces = spm_pieces([("\u2581", -1.0), ("a", -1.0), ("b", -1.0), ("c", -1.0), ("ab", -5.0), ("bc", -2.0)])
    tok = _core.Tokenizer.from_file(write_vocab(tmp_path / "v.gguf", sentencepiece_vocab(pieces)))
    assert tok.encode("abc", add_special=False) == ids_of(tok, ["\u2581", "a", "bc"])


def test_sentencepiece_prefixes_a_space_and_falls_back_to_byte_tokens(tmp_path):
    pieces = spm_pieces([("\u2581", -1.0), ("a", -1.0)])
    tok = _core.Tokenizer.from_file(write_vocab(tmp_path / "v.gguf", sentencepiece_vocab(pieces)))
    ids = tok.encode("a\u00e9", add_special=True)
    assert ids == [1] + ids_of(tok, ["\u2581", "a", "<0xC3>", "<0xA9>"])
    assert tok.decode(ids) == " a\u00e9"  # llama.cpp keeps the space after a dropped BOS
    assert tok.decode(ids[1:]) == "a\u00e9"


def test_add_space_prefix_false_is_respected(tmp_path):
    pieces = spm_pieces([("\u2581", -1.0), ("a", -1.0)])
    kv = sentencepiece_vocab(pieces, **{"tokenizer.ggml.add_space_prefix": False})
    tok = _core.Tokenizer.from_file(write_vocab(tmp_path / "v.gguf", kv))
    assert not tok.add_space_prefix
    assert tok.encode("a", add_special=False) == ids_of(tok, ["a"])


# --- malformed metadata -----------------------------------------------------


def expect_error(tmp_path, kv: dict, key: str) -> None:
    path = write_vocab(tmp_path / "bad.gguf", kv)
    with pytest.raises(ModelFormatError, match=key.replace(".", r"\.")):
        _core.Tokenizer.from_file(path)


def test_missing_model_key_is_named(tmp_path):
    kv = byte_level_vocab([], [])
    del kv["tokenizer.ggml.model"]
    expect_error(tmp_path, kv, "tokenizer.ggml.model")


def test_unsupported_tokenizer_model_is_named(tmp_path):
    expect_error(tmp_path, byte_level_vocab([], [], **{"tokenizer.ggml.model": "bert"}), "tokenizer.ggml.model")


def test_unknown_pre_tokenizer_is_named(tmp_path):
    expect_error(tmp_path, byte_level_vocab([], [], **{"tokenizer.ggml.pre": "no-such-pre"}), "tokenizer.ggml.pre")


def test_missing_token_list_is_named(tmp_path):
    kv = byte_level_vocab([], [])
    del kv["tokenizer.ggml.tokens"]
    expect_error(tmp_path, kv, "tokenizer.ggml.tokens")


def test_duplicate_token_text_is_rejected(tmp_path):
    expect_error(tmp_path, byte_level_vocab(["a"], ["b c"]), "tokenizer.ggml.tokens")


def test_scores_must_have_one_entry_per_token(tmp_path):
    kv = sentencepiece_vocab(spm_pieces([("a", -1.0)]))
    kv["tokenizer.ggml.scores"] = ("f32", [0.0] * 10)
    expect_error(tmp_path, kv, "tokenizer.ggml.scores")


def test_token_types_must_have_one_entry_per_token(tmp_path):
    kv = sentencepiece_vocab(spm_pieces([("a", -1.0)]))
    kv["tokenizer.ggml.token_type"] = ("types", [1] * 10)
    expect_error(tmp_path, kv, "tokenizer.ggml.token_type")


def test_byte_level_vocab_needs_merges(tmp_path):
    kv = byte_level_vocab([], [])
    del kv["tokenizer.ggml.merges"]
    expect_error(tmp_path, kv, "tokenizer.ggml.merges")


def test_merge_naming_an_unknown_token_is_rejected(tmp_path):
    expect_error(tmp_path, byte_level_vocab([], ["a zz"]), "tokenizer.ggml.merges")


def test_merge_whose_result_is_not_a_token_is_rejected(tmp_path):
    expect_error(tmp_path, byte_level_vocab([], ["a b"]), "tokenizer.ggml.merges")


def test_merge_without_separator_is_rejected(tmp_path):
    expect_error(tmp_path, byte_level_vocab(["ab"], ["ab"]), "tokenizer.ggml.merges")


def test_bos_id_out_of_range_is_rejected(tmp_path):
    kv = byte_level_vocab([], [], **{"tokenizer.ggml.bos_token_id": 100000})
    expect_error(tmp_path, kv, "tokenizer.ggml.bos_token_id")


def test_add_bos_without_a_bos_token_is_rejected(tmp_path):
    # Three tokens: the gpt2 default BOS id (11) does not exist.
    kv = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": ["a", "b", "ab"],
        "tokenizer.ggml.merges": ["a b"],
        "tokenizer.ggml.add_bos_token": True,
    }
    expect_error(tmp_path, kv, "tokenizer.ggml.bos_token_id")


def test_padding_id_out_of_range_is_tolerated_like_llama_cpp(tmp_path):
    kv = byte_level_vocab([], [], **{"tokenizer.ggml.padding_token_id": 100000})
    tok = _core.Tokenizer.from_file(write_vocab(tmp_path / "v.gguf", kv))
    assert tok.pad_id == -1


def test_every_known_pre_tokenizer_builds_and_splits_text(tmp_path):
    names = _core.Tokenizer.known_pre_tokenizers()
    for required in ["default", "llama3", "llama-bpe", "gpt-2", "qwen2", "smollm", "deepseek-llm", "deepseek-coder",
                     "falcon", "starcoder", "mpt"]:
        assert required in names
    text = "Hello world! It's 2024: naïve café, 東京 — x**2\n\n  done\t"
    for i, name in enumerate(names):
        kv = byte_level_vocab([], [], **{"tokenizer.ggml.pre": name})
        tok = _core.Tokenizer.from_file(write_vocab(tmp_path / f"v{i}.gguf", kv))
        assert tok.pre == name
        ids = tok.encode(text, add_special=False)
        assert b"".join(tok.piece(t) for t in ids) == text.encode(), name
