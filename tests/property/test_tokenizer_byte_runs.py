"""The byte-run shortcut gives the general merge loop's ids.

A byte-level BPE word made of one byte repeated (a run of spaces, letters,
dashes: the pre-tokenizer keeps it as one word) is merged on its run-length
encoding, one step per merge of the byte's run tokens, when those merges are
"level-ordered" (csrc/tokenizer/byte_runs.h says why that makes the result
the general loop's). `_testing.tokenizer_encode(..., "runs")` takes the
shortcut at every run length; "heap" and "buckets" never take it (the
general loop, which the llama.cpp comparison tests pin down); "auto" takes it
for runs of 16 bytes and more.

Checked on the eight byte-level BPE vocabularies among llama.cpp's reference
vocabularies and on smollm2 (every ASCII byte, every length up to 256 and
up to 700 for common runs, Hypothesis lengths up to 5,000, runs of 10^5 and
more, runs inside text), and on synthetic vocabularies whose run merges are
level-ordered or shuffled, against a direct Python statement of the merge
loop on run lengths.
"""

from __future__ import annotations

import random
from pathlib import Path

import gguf
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from muser import _core

from tests.fixtures.gpt2_bytes import gpt2_byte_chars

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VOCAB_DIR = FIXTURES / "reference" / "tokenizer"
BPE_VOCABS = sorted(
    p.name[len("ggml-vocab-"):-len(".gguf")] for p in VOCAB_DIR.glob("ggml-vocab-*.gguf")
    if p.name not in ("ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"))
ASCII = [chr(b) for b in range(128)]

_cache: dict[str, object] = {}


def reference_tokenizer(name: str):
    if name not in _cache:
        _cache[name] = _core.Tokenizer.from_file(str(VOCAB_DIR / f"ggml-vocab-{name}.gguf"))
    return _cache[name]


def encode(tok, text: str, queue: str) -> list[int]:
    return _core._testing.tokenizer_encode(tok, text, queue, False, False)


def assert_shortcut_is_the_general_loop(tok, text: str) -> None:
    runs = encode(tok, text, "runs")
    assert runs == encode(tok, text, "heap"), f"{text[:20]!r}... ({len(text)} chars)"
    assert encode(tok, text, "buckets") == runs
    assert encode(tok, text, "auto") == runs


def test_the_shortcut_is_taken_for_the_usual_runs():
    # Otherwise the comparisons below would compare the general loop with itself.
    for name in ("gpt-2", "qwen2", "starcoder", "deepseek-coder"):
        tok = reference_tokenizer(name)
        for ch in " -=*#.a\n\t":
            assert _core._testing.tokenizer_byte_run_shortcut(tok, ord(ch)), (name, ch)
    with pytest.raises(ValueError, match="byte outside"):
        _core._testing.tokenizer_byte_run_shortcut(reference_tokenizer("gpt-2"), 256)


@pytest.mark.slow
@pytest.mark.parametrize("name", BPE_VOCABS)
def test_every_ascii_byte_and_length(name):
    # Every length up to 256 for every ASCII byte (past the longest run
    # token of these vocabularies, 64-80 bytes, so every way a run can end),
    # up to 700 for the common runs.
    tok = reference_tokenizer(name)
    for ch in ASCII:
        if not _core._testing.tokenizer_byte_run_shortcut(tok, ord(ch)):
            continue
        for n in range(1, 701 if ch in " -a\n" else 257):
            text = ch * n
            assert encode(tok, text, "runs") == encode(tok, text, "heap"), (ch, n)


@pytest.mark.parametrize("name", BPE_VOCABS)
@settings(max_examples=60, deadline=None, derandomize=True)
@given(ch=st.sampled_from(ASCII), n=st.integers(1, 5000), before=st.sampled_from(["", "x", " ", "7", "ab "]),
       after=st.sampled_from(["", "x", " y", "\n", "!"]))
def test_generated_runs_inside_text(name, ch, n, before, after):
    assert_shortcut_is_the_general_loop(reference_tokenizer(name), before + ch * n + after)


@pytest.mark.parametrize("name", BPE_VOCABS)
def test_long_runs(name):
    tok = reference_tokenizer(name)
    for ch in " -a\n":
        for n in (65_535, 65_536, 100_001, 131_073):
            assert_shortcut_is_the_general_loop(tok, ch * n)


@pytest.mark.real_model
def test_smollm2_runs(real_model_path):
    tok = _core.Tokenizer.from_file(real_model_path("smollm2-135m"))
    assert _core._testing.tokenizer_byte_run_shortcut(tok, ord(" "))
    for ch in " -=a\n*_~.":
        for n in range(1, 701):
            assert_shortcut_is_the_general_loop(tok, ch * n)
        for n in (4_095, 4_096, 65_537, 300_001):
            assert_shortcut_is_the_general_loop(tok, ch * n)
    rng = random.Random(3)
    for _ in range(200):
        ch = rng.choice(ASCII)
        assert_shortcut_is_the_general_loop(tok, ch * rng.randrange(1, 20_000))


# --- synthetic vocabularies: run tokens of one character, merges in any order ---

BYTE_CHARS = gpt2_byte_chars()


def write_run_vocab(path: Path, unit: str, merges: list[tuple[int, int]]) -> str:
    """256 byte tokens, the run tokens unit*k the merges create, and the merges (unit*i, unit*j) in order."""
    tokens = list(BYTE_CHARS)
    for i, j in merges:
        if unit * (i + j) not in tokens:
            tokens.append(unit * (i + j))
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "gpt-2")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.merges", [f"{unit * i} {unit * j}" for i, j in merges])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def run_lengths_by_python_loop(merges: list[tuple[int, int]], n: int) -> list[int]:
    """llama.cpp's merge loop on a run of n: merge the adjacent pair of lowest rank, leftmost first."""
    rank = {}
    for r, pair in enumerate(merges):
        rank.setdefault(pair, r)
    symbols = [1] * n
    while True:
        best = None
        for k in range(len(symbols) - 1):
            r = rank.get((symbols[k], symbols[k + 1]))
            if r is not None and (best is None or r < best[0]):
                best = (r, k)
        if best is None:
            return symbols
        k = best[1]
        symbols[k:k + 2] = [symbols[k] + symbols[k + 1]]


def level_ordered(merges: list[tuple[int, int]]) -> bool:
    first = {}
    for r, pair in enumerate(merges):
        first.setdefault(pair, r)
    last_created = {}
    for pair, r in first.items():
        last_created[sum(pair)] = max(last_created.get(sum(pair), -1), r)
    return all(r > last_created.get(side, -1) for pair, r in first.items() for side in pair)


@st.composite
def run_merges(draw):
    """Merges among run lengths up to 40: each length is made from existing lengths, then ranked
    either by result length (level-ordered) or shuffled (usually not), with duplicates sometimes."""
    lengths = [1]
    merges = []
    for _ in range(draw(st.integers(1, 14))):
        i = draw(st.sampled_from(lengths))
        j = draw(st.sampled_from(lengths))
        if i + j > 40:
            continue
        merges.append((i, j))
        if i + j not in lengths:
            lengths.append(i + j)
    order = draw(st.sampled_from(["by length", "shuffled"]))
    if order == "by length":
        merges.sort(key=lambda pair: sum(pair))
    else:
        merges = draw(st.permutations(merges))
    if merges and draw(st.booleans()):
        merges = merges + [draw(st.sampled_from(merges))]  # a repeated pair: the first rank counts
    return merges or [(1, 1)]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(merges=run_merges(), ch=st.sampled_from(["a", "-", " "]), lengths=st.lists(st.integers(1, 3000), max_size=3))
# Level-ordered: 1+1, then 2+1 before 2+2 and 3+3 (a run of 3 pairs from the left first).
@example(merges=[(1, 1), (2, 1), (2, 2), (3, 3), (4, 3), (6, 6)], ch="a", lengths=[2999])
# Not level-ordered: 2+2 ranks before 1+1, which creates its 2s.
@example(merges=[(2, 2), (1, 1), (4, 1)], ch="-", lengths=[1000])
def test_synthetic_vocabularies(tmp_path_factory, merges, ch, lengths):
    byte = ord(ch)
    event(f"level-ordered: {level_ordered(merges)}")
    unit = BYTE_CHARS[byte]
    path = write_run_vocab(tmp_path_factory.mktemp("runs") / "vocab.gguf", unit, merges)
    tok = _core.Tokenizer.from_file(path)
    assert _core._testing.tokenizer_byte_run_shortcut(tok, byte) == level_ordered(merges), merges
    id_of_text = {tok.token_text(i).decode(): i for i in range(tok.n_vocab)}
    for n in [*range(1, 90), *lengths]:
        text = ch * n
        runs = encode(tok, text, "runs")
        assert runs == encode(tok, text, "heap"), (merges, n)
        assert encode(tok, text, "auto") == runs
        if n <= 300:
            assert runs == [id_of_text[unit * k] for k in run_lengths_by_python_loop(merges, n)], (merges, n)
