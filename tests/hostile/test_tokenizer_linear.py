"""Item 1: tokenization is linear in the text length for every kind of text.

A memo hit used to reserve the output vector to its exact new size, which
defeats geometric growth and made every repeated word copy all ids so far:
"7" * n took time quadratic in n. Timing on a shared machine is noisy, so the test compares two
texts that are both too big for the CPU caches (so both pay the same memory
costs), one 8 times longer: linear costs about 8x (a little more with the
merge heap's log factor), quadratic 64x; the bound (24x) leaves room for noise.
"""

from __future__ import annotations

import random
import time

import pytest

import muser

SHORT = 200_000
GROWTH = 8
MAX_RATIO = 24


def _best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def _texts() -> dict[str, callable]:
    rng = random.Random(17)
    ascii_chars = [chr(c) for c in range(32, 127)]
    return {
        "digits": lambda n: "7" * n,
        "spaced letters": lambda n: "a " * (n // 2),
        "whitespace": lambda n: " " * n,
        "random ascii": lambda n: "".join(rng.choice(ascii_chars) for _ in range(n)),
    }


@pytest.mark.slow
@pytest.mark.parametrize("tokenizer", ["gpt2", "llama"])
@pytest.mark.parametrize("kind", list(_texts()))
def test_tokenize_time_grows_linearly(tiny_model, tokenizer, kind):
    engine = muser.Engine(tiny_model("llama", tokenizer=tokenizer), backend="null")
    make = _texts()[kind]
    short, long = make(SHORT), make(SHORT * GROWTH)
    engine.tokenize(short)  # warm up
    t_short = _best_time(lambda: engine.tokenize(short), 3)
    t_long = _best_time(lambda: engine.tokenize(long), 1)
    assert t_long < MAX_RATIO * max(t_short, 1e-4), (
        f"{kind}: {len(short)} chars took {t_short * 1e3:.1f} ms, {len(long)} chars {t_long * 1e3:.1f} ms")
