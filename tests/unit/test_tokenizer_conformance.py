"""The tokenizer reproduces llama.cpp's token ids on its own test vectors.

tests/fixtures/reference/tokenizer/ holds vocabulary-only GGUF files with 47
texts each (`.inp`) and the ids llama.cpp produced for them (`.out`, with
add_special=False, parse_special=False). Every case of every vocabulary must
match; each test reports all mismatches of its vocabulary at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from muser import _core

VOCAB_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "tokenizer"
SEPARATOR = "\n__ggml_vocab_test__\n"
VOCABS = sorted(p.name for p in VOCAB_DIR.glob("ggml-vocab-*.gguf"))

# Vocabularies whose llama.cpp detokenizer does not "clean up" spaces before
# punctuation, so decoding gives back exactly the text that was encoded.
NO_CLEANUP = {"ggml-vocab-deepseek-coder.gguf", "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-qwen2.gguf"}
SENTENCEPIECE = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"}


def load_cases(name: str) -> list[tuple[str, list[int]]]:
    with open(VOCAB_DIR / f"{name}.inp", encoding="utf-8", newline="") as f:
        texts = f.read().split(SEPARATOR)
    with open(VOCAB_DIR / f"{name}.out", encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    assert len(lines) >= len(texts), f"{name}: fewer expected lines than texts"
    return [(text, [int(x) for x in lines[i].split()]) for i, text in enumerate(texts)]


@pytest.fixture(scope="module", params=VOCABS)
def vocab(request):
    name = request.param
    return name, _core.Tokenizer.from_file(str(VOCAB_DIR / name)), load_cases(name)


def test_there_are_ten_vocabularies_with_47_cases_each():
    assert len(VOCABS) == 10
    assert sum(len(load_cases(name)) for name in VOCABS) == 470


def test_every_case_matches_llama_cpp(vocab):
    name, tok, cases = vocab
    mismatches = []
    for text, expected in cases:
        got = tok.encode(text, add_special=False, parse_special=False)
        if got != expected:
            mismatches.append(f"{text!r}: expected {expected}, got {got}")
    assert not mismatches, f"{name}: {len(mismatches)} of {len(cases)} cases differ:\n" + "\n".join(mismatches)


def test_token_pieces_concatenate_back_to_the_text(vocab):
    # Byte-level: the pieces of the ids are exactly the input bytes (for
    # SentencePiece, plus the one space prefix the encoder added).
    name, tok, cases = vocab
    pieces = tok.token_bytes(special=False)
    bad = []
    for text, expected in cases:
        joined = b"".join(pieces[t] for t in expected)
        want = text.encode("utf-8")
        if name in SENTENCEPIECE and tok.add_space_prefix and text:
            want = b" " + want
        if joined != want:
            bad.append(f"{text!r} -> {joined!r}")
    assert not bad, f"{name}: pieces differ from the text:\n" + "\n".join(bad)


def test_decode_round_trips_where_llama_cpp_does_not_clean_up(vocab):
    name, tok, cases = vocab
    if name not in NO_CLEANUP and name not in SENTENCEPIECE:
        assert tok.decode(tok.encode("Hello , world !", add_special=False)) == "Hello, world!"
        return
    bad = [text for text, expected in cases if tok.decode(expected) != text]
    assert not bad, f"{name}: decode(encode(x)) != x for {bad!r}"
