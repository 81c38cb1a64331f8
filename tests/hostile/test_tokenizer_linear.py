"""Item 1: tokenizing text made of many repeated words is linear in its length.

A memo hit (a word already encoded in this call) used to reserve the output
vector to its exact new size, which defeats geometric growth: every repeated
word copied all ids so far, and "7" * n took time quadratic in n (1 MB of
digits: 270 s). The test compares such texts with English prose of the same
length on the real vocabularies (byte-level BPE and SentencePiece), so both
runs pay the same cache and memory costs: the fixed encoder stays within a
few times prose (at most ~6x here), the quadratic one was over 200 times
slower at this size. The bound (20x) leaves room for a loaded machine.

Texts that are one enormous word (a 400 kB run of spaces) are merged through
a bucketed queue (csrc/tokenizer/merge_queue.h) instead of a heap of the
whole word; benchmarks/bench_tokenizer_hostile.py measures every kind of text
against prose at 10 k, 100 k and 1 M characters.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

import muser

LENGTH = 400_000
MAX_RATIO_TO_PROSE = 20
PROSE = (Path(__file__).parents[1] / "fixtures" / "long_prompt.txt").read_text(encoding="utf-8")


def _best_time(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def pathological_texts(length: int) -> dict[str, str]:
    """The kinds of text the hostile-input campaign found slow, `length` characters each."""
    rng = random.Random(17)
    printable = [chr(c) for c in range(32, 127)]
    return {
        "digits": "7" * length,
        "spaced letters": "a " * (length // 2),
        "whitespace": " " * length,
        "newlines": "\n" * length,
        "random ascii": "".join(rng.choice(printable) for _ in range(length)),
        "random unicode": "".join(
            chr(rng.choice((rng.randrange(0x20, 0xD800), rng.randrange(0xE000, 0x110000)))) for _ in range(length)
        ),
    }


def prose(length: int) -> str:
    return (PROSE * (length // len(PROSE) + 1))[:length]


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def real_engine(request, real_model_path):
    return muser.Engine(real_model_path(request.param), backend="null", threads=1)


@pytest.mark.slow
@pytest.mark.real_model
@pytest.mark.parametrize("kind", ["digits", "spaced letters", "random ascii", "whitespace", "newlines", "random unicode"])
def test_pathological_text_tokenizes_within_a_few_times_prose(real_engine, kind):
    text = pathological_texts(LENGTH)[kind]
    baseline = prose(LENGTH)
    t_prose = _best_time(lambda: real_engine.tokenize(baseline))
    t_text = _best_time(lambda: real_engine.tokenize(text))
    assert t_text < MAX_RATIO_TO_PROSE * t_prose, (
        f"{kind}: {LENGTH} chars took {t_text * 1e3:.1f} ms, prose {t_prose * 1e3:.1f} ms")
