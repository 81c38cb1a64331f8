"""The merge loops give the same ids whichever priority queue they use.

Long words (a run of spaces is one pre-tokenizer word) are merged through a
bucketed queue (csrc/tokenizer/merge_queue.h) instead of the binary heap
that reproduces llama.cpp; the queue must pop the same pairs in the same
order, so every id must be the same. `_testing.tokenizer_encode` forces one
queue for every word ("heap", "buckets") or picks as encode() does ("auto").

Checked on the ten llama.cpp reference vocabularies and the two real models,
over generated text with long runs and mixed scripts, and against two direct
Python statements of the merge loops (byte-level BPE below, SentencePiece in
tests/fixtures/spm_reference.py) that share no code with the C++ encoder.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muser import _core

from tests.fixtures.gpt2_bytes import gpt2_byte_chars

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VOCAB_DIR = FIXTURES / "reference" / "tokenizer"
VOCABS = sorted(p.name[len("ggml-vocab-"):-len(".gguf")] for p in VOCAB_DIR.glob("ggml-vocab-*.gguf"))
QUEUES = ("heap", "buckets", "auto")

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)

_cache: dict[str, object] = {}


def reference_tokenizer(name: str):
    if name not in _cache:
        _cache[name] = _core.Tokenizer.from_file(str(VOCAB_DIR / f"ggml-vocab-{name}.gguf"))
    return _cache[name]


def ids_by_queue(tok, text: str, parse_special: bool = False) -> dict[str, list[int]]:
    return {q: _core._testing.tokenizer_encode(tok, text, q, False, parse_special) for q in QUEUES}


def assert_same_ids(tok, text: str, parse_special: bool = False) -> None:
    got = ids_by_queue(tok, text, parse_special)
    assert got["buckets"] == got["heap"], f"buckets differ from the heap on {text[:60]!r}... ({len(text)} chars)"
    assert got["auto"] == got["heap"], f"auto differs from the heap on {text[:60]!r}... ({len(text)} chars)"
    assert tok.encode(text, add_special=False, parse_special=parse_special) == got["heap"]


# Runs of a few pieces, repeated up to hundreds of times: long words of
# spaces, newlines, tabs, letters, digits, CJK, emoji, U+2581 and mixtures.
PIECES = st.sampled_from(
    [" ", "  ", "\n", "\t", " \n", "\r\n", "a", "ab", "aab", "abc ", "e", "7", "12", "東", "日本", "🚀", "é",
     "\u2581", "\u2581\u2581", "<", "/>", "--", "x y", "Здрав", "مرح", "\u00a0", "'s", "..."]
)
RUNS = st.lists(st.tuples(PIECES, st.integers(1, 400)), min_size=1, max_size=5).map(
    lambda parts: "".join(piece * count for piece, count in parts))
TEXT = st.one_of(RUNS, st.text(max_size=300), st.lists(st.one_of(RUNS, st.text(max_size=20)), max_size=4).map("".join))


@pytest.mark.parametrize("name", VOCABS)
@SETTINGS
@given(text=TEXT)
def test_reference_vocabularies_give_the_same_ids_with_either_queue(name, text):
    assert_same_ids(reference_tokenizer(name), text)


def adversarial_texts() -> list[str]:
    rng = random.Random(1717)
    printable = [chr(c) for c in range(32, 127)]
    return [
        " " * 5000, " " * 257, "\n" * 3000, "\t" * 1000, " \n" * 2000, "  \n\n" * 700, " " * 999 + "a",
        "a" * 4000, "ab" * 2500, "aab" * 1500, "7" * 5000, "東" * 2000, "日本語" * 700, "🚀" * 1000,
        "\u2581" * 1500, "x" * 300 + " " * 300 + "y" * 300, "Здравствуй" * 300, "مرحبا" * 400,
        "".join(rng.choice(printable) for _ in range(20_000)),
        "".join(rng.choice("ab ") for _ in range(20_000)),
        "".join(rng.choice("ab") for _ in range(8_000)),
        "".join(chr(rng.choice((rng.randrange(0x20, 0xD800), rng.randrange(0xE000, 0x110000)))) for _ in range(8_000)),
        "".join(rng.choice(["the", "東京", "🚀", " ", "  ", "\n", "7", "é", "ﬀ", "𝔘"]) for _ in range(6_000)),
    ]


@pytest.mark.parametrize("name", VOCABS)
def test_reference_vocabularies_give_the_same_ids_on_adversarial_texts(name):
    tok = reference_tokenizer(name)
    for text in adversarial_texts():
        assert_same_ids(tok, text)


@pytest.mark.real_model
@pytest.mark.parametrize("key", ["smollm2-135m", "gemma3-270m"])
def test_real_models_give_the_same_ids_with_either_queue(key, real_model_path):
    tok = _core.Tokenizer.from_file(real_model_path(key))
    for text in adversarial_texts() + [" " * 100_000, "ab" * 50_000]:
        assert_same_ids(tok, text)
        assert_same_ids(tok, text, parse_special=True)


@pytest.mark.real_model
@pytest.mark.parametrize("key", ["smollm2-135m", "gemma3-270m"])
@settings(max_examples=40, deadline=None, derandomize=True)
@given(text=TEXT)
def test_real_models_give_the_same_ids_on_generated_text(key, real_model_path, text):
    if key not in _cache:
        _cache[key] = _core.Tokenizer.from_file(real_model_path(key))
    assert_same_ids(_cache[key], text)


# --- byte-level BPE against a direct Python statement of the merge loop ---

class BpeReference:
    """llama.cpp's BPE merge for one pre-tokenizer word: merge the adjacent
    pair of lowest rank, the leftmost among equals, until none has a rank."""

    def __init__(self, path: str) -> None:
        metadata = _core.GgufFile.open(path).metadata()
        self.ids = {t: i for i, t in enumerate(metadata["tokenizer.ggml.tokens"])}
        self.ranks = {}
        for rank, merge in enumerate(metadata["tokenizer.ggml.merges"]):
            left, right = merge.split(" ", 1)
            self.ranks.setdefault((left, right), rank)
        self.byte_chars = gpt2_byte_chars()

    def encode_word(self, word: str) -> list[int]:
        symbols = [self.byte_chars[b] for b in word.encode("utf-8")]
        while True:
            best = None
            for i in range(len(symbols) - 1):
                rank = self.ranks.get((symbols[i], symbols[i + 1]))
                if rank is not None and (best is None or rank < best[0]):
                    best = (rank, i)
            if best is None:
                return [self.ids[s] for s in symbols]
            i = best[1]
            symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]


@pytest.fixture(scope="module")
def gpt2_reference():
    return BpeReference(str(VOCAB_DIR / "ggml-vocab-gpt-2.gguf"))


# Texts that GPT-2's pre-tokenizer keeps as one word: a run of whitespace,
# of letters (after an optional space), of digits or of punctuation.
ONE_WORD = st.one_of(
    st.text(alphabet=" ", min_size=1, max_size=400),
    st.builds(lambda space, letters: space + letters, st.sampled_from(["", " "]),
              st.text(alphabet="abeinrst", min_size=1, max_size=300)),
    st.text(alphabet="0123456789", min_size=1, max_size=300),
    st.text(alphabet="!?.-=<>/", min_size=1, max_size=300),
)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(word=ONE_WORD)
def test_bpe_ids_equal_the_python_merge_loop(gpt2_reference, word):
    tok = reference_tokenizer("gpt-2")
    expected = gpt2_reference.encode_word(word)
    for queue in QUEUES:
        assert _core._testing.tokenizer_encode(tok, word, queue) == expected, queue


# --- SentencePiece against tests/fixtures/spm_reference.py ---

def _load_spm_reference():
    spec = importlib.util.spec_from_file_location("spm_reference", FIXTURES / "spm_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SentencePieceReference(str(VOCAB_DIR / "ggml-vocab-llama-spm.gguf"))


@pytest.fixture(scope="module")
def spm_reference():
    return _load_spm_reference()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(text=st.one_of(RUNS.filter(lambda t: len(t) <= 600), st.text(alphabet="abt \n東🚀", max_size=400)))
def test_sentencepiece_ids_equal_the_python_merge_loop(spm_reference, text):
    tok = reference_tokenizer("llama-spm")
    expected = spm_reference.encode_fragment(b" " + text.encode("utf-8")) if text else []
    for queue in QUEUES:
        assert _core._testing.tokenizer_encode(tok, text, queue) == expected, queue


# --- the queue on its own: pops in ascending (priority, left) order ---

# Few priorities and lefts, so that equal priorities and out-of-order pushes
# into a bucket (its "late" heap) are common; -1 pops, -2 clears.
OPERATIONS = st.lists(
    st.one_of(st.tuples(st.integers(0, 6), st.integers(0, 60)), st.just((-1, 0)), st.just((-2, 0))), max_size=300)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(operations=OPERATIONS)
def test_merge_queue_pops_in_priority_then_left_order(operations):
    model: list[tuple[int, int]] = []
    expected = []
    for priority, left in operations:
        if priority == -2:
            model.clear()
        elif priority == -1:
            if model:
                model.sort()
                expected.append(model.pop(0))
        else:
            model.append((priority, left))
    assert _core._testing.merge_queue_pops(operations) == expected


def test_merge_queue_spans_the_whole_priority_range():
    # SentencePiece priorities are float scores' bits: the full 32-bit range.
    pushes = [(p, left) for left, p in enumerate([2**32 - 1, 0, 2**31, 7, 2**31 - 1, 2**32 - 2])]
    got = _core._testing.merge_queue_pops(pushes + [(-1, 0)] * (len(pushes) + 1))
    assert got == sorted(pushes)


def test_an_unknown_queue_name_is_refused():
    with pytest.raises(ValueError, match="queue must be"):
        _core._testing.tokenizer_encode(reference_tokenizer("gpt-2"), "x", "fast")


def test_the_word_memo_forgets_words_without_changing_ids():
    # 24,000 distinct words, each used three times in a random order: more
    # than the memo's 16,384 slots, so words are evicted and encoded again.
    # GPT-2's pre-tokenizer makes each " word" a word of its own, so the ids
    # of the whole text are the ids of its words encoded one by one.
    rng = random.Random(5)
    letters = "abcdefghijklmnopqrstuvwxyzäöüßαβγδεжзиклм"
    vocabulary = list({"".join(rng.choice(letters) for _ in range(rng.randrange(2, 9))) for _ in range(24_000)})
    words = vocabulary * 3
    rng.shuffle(words)
    tok = reference_tokenizer("gpt-2")
    pieces = [words[0]] + [" " + w for w in words[1:]]
    expected = [i for piece in pieces for i in tok.encode(piece, add_special=False)]
    assert tok.encode("".join(pieces), add_special=False) == expected


def test_the_word_memo_gives_back_short_and_long_words_exactly():
    # Words of 1 to 64 bytes (kept in the slot up to 8 bytes, in the key
    # arena above), encoding to 1 to ~40 ids (copied into the slot up to 4,
    # a range of the output above), each used several times; 60,000 distinct
    # long words store more than the arena's 1 MiB, so the memo starts over
    # mid-text. The whole text's ids must be its words' ids one by one.
    rng = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyzäöüßαβγδεжзиклм東京語🚀"
    words = set()
    while len(words) < 60_000:
        words.add("".join(rng.choice(letters) for _ in range(rng.randrange(1, 24))))
    vocabulary = sorted(words)
    pieces = [" " + w for w in vocabulary * 3]
    rng.shuffle(pieces)
    tok = reference_tokenizer("gpt-2")
    by_word = {p: tok.encode(p, add_special=False) for p in set(pieces)}
    assert min(len(p.encode()) for p in by_word) <= 8 < max(len(p.encode()) for p in by_word) <= 64 + 32
    assert min(map(len, by_word.values())) <= 4 < max(map(len, by_word.values()))
    expected = [i for p in pieces for i in by_word[p]]
    assert tok.encode("".join(pieces), add_special=False) == expected
