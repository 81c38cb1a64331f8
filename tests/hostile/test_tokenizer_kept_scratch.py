"""Work buffers a thread keeps between encode calls: bounded, and invisible in the ids.

Byte-level BPE encoding borrows its work buffers (code points, words,
symbols, queues, the word memo) and the ids buffer from the calling thread
and gives them back for its next call (csrc/tokenizer/thread_scratch.h),
unless they grew past a bound: then they are freed, so a thread that once
tokenized a huge text does not hold that memory. Every use clears what it
reads first, so ids never depend on what a thread encoded before, including
calls that stopped half-way (cancelled).
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

import muser
from muser import _core

VOCAB_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "tokenizer"
PROSE = (Path(__file__).parents[1] / "fixtures" / "long_prompt.txt").read_text(encoding="utf-8")


def random_unicode(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(chr(rng.choice((rng.randrange(0x20, 0xD800), rng.randrange(0xE000, 0x110000)))) for _ in range(n))


def in_new_thread(fn):
    """fn() on a thread of its own (which starts with nothing kept); its result or exception."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


@pytest.fixture(scope="module")
def tok():
    return _core.Tokenizer.from_file(str(VOCAB_DIR / "ggml-vocab-gpt-2.gguf"))


def test_a_thread_keeps_at_most_the_bound(tok):
    limit = _core._testing.tokenizer_kept_scratch_limit()
    assert limit >= 16 << 20

    def calls():
        kept = [_core._testing.tokenizer_kept_scratch_bytes()]
        tok.encode(PROSE[:50_000], add_special=False)
        kept.append(_core._testing.tokenizer_kept_scratch_bytes())
        # 8 M random characters: ~30 MB of UTF-8, buffers and ids past the bound.
        tok.encode(random_unicode(500_000, 1) * 16, add_special=False)
        kept.append(_core._testing.tokenizer_kept_scratch_bytes())
        tok.encode(PROSE[:50_000], add_special=False)
        kept.append(_core._testing.tokenizer_kept_scratch_bytes())
        return kept

    fresh, after_small, after_huge, after_small_again = in_new_thread(calls)
    assert fresh == (0, 0)
    assert all(0 < b <= limit for b in after_small), after_small
    assert after_huge == (0, 0), "buffers past the bound must be freed when the call ends"
    assert all(0 < b <= limit for b in after_small_again), after_small_again


def test_ids_do_not_depend_on_what_the_thread_encoded_before(tok):
    rng = random.Random(7)
    texts = [
        random_unicode(300_000, 2), "hello world", "", " " * 100_000 + "x", PROSE, "7" * 50_000,
        "".join(rng.choice("ab \n'") for _ in range(80_000)), random_unicode(2_000, 3), "a",
        PROSE[:1000] + random_unicode(500, 4) + "  \n\n" * 50, "Здравствуй мир 東京 🚀" * 300,
    ]
    expected = [in_new_thread(lambda t=t: tok.encode(t, add_special=False)) for t in texts]
    expected_bytes = in_new_thread(lambda: tok.encode(b"\xff\xfe abc \xc3", add_special=False))

    def sequence():
        got = []
        for round_ in range(2):
            for t in (texts if round_ == 0 else texts[::-1]):
                got.append((t, tok.encode(t, add_special=False)))
            # A call stopped half-way leaves the buffers in whatever state it reached.
            token = muser.CancelToken()
            timer = threading.Timer(0.002, token.cancel)
            timer.start()
            try:
                tok.encode(random_unicode(1_000_000, 5) + PROSE, add_special=False, cancel=token)
            except muser.Cancelled:
                pass
            timer.join()
            got.append((b"", tok.encode(b"\xff\xfe abc \xc3", add_special=False)))
        return got

    by_text = dict(zip(texts, expected))
    for text, ids in in_new_thread(sequence):
        if text == b"":
            assert ids == expected_bytes
        else:
            assert ids == by_text[text], f"{text[:30]!r}... ({len(text)} chars)"
