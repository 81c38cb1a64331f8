"""Tokenization inside a request honours the request's cancellation and deadline.

A prompt may be 16 Mi characters (muser.limits.MAX_TEXT_CHARS): a second or
more of tokenizing, which is part of the request. The encoder reads a cancel
token every 16 KiB of work with the GIL released; generate/stream/chat and the
OpenAI-style calls tokenize under a token that carries the caller's ``cancel``
and the request's ``timeout`` (counted from the call), and end as the request
would: DeadlineExceeded past the timeout, Cancelled when cancelled.

Bounds are orderings where possible: a deadline that has passed, or a token
cancelled, before the call starts; the one test that cancels mid-call
compares against the same call uncancelled, with a wide margin.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import muser
from muser import _core

PROSE = (Path(__file__).parents[1] / "fixtures" / "long_prompt.txt").read_text(encoding="utf-8")
BIG = (PROSE * (2_000_000 // len(PROSE) + 1))[:2_000_000]


@pytest.fixture(scope="module")
def engine(tiny_model):
    return muser.Engine(tiny_model("llama", tokenizer="gpt2"), backend="null", threads=1)


def _cancelled_token() -> muser.CancelToken:
    token = muser.CancelToken()
    token.cancel()
    return token


def _expired_token() -> muser.CancelToken:
    token = muser.CancelToken()
    token.set_deadline(0)
    return token


def test_a_cancelled_token_stops_encoding(engine):
    with pytest.raises(muser.Cancelled, match="cancelled while tokenizing"):
        engine.tokenize(BIG, cancel=_cancelled_token())


def test_a_passed_deadline_stops_encoding_and_says_so(engine):
    token = _expired_token()
    with pytest.raises(muser.Cancelled, match="deadline passed while tokenizing"):
        engine.tokenize(BIG, cancel=token)
    assert token.deadline_passed


def test_a_parent_token_cancels_its_child(engine):
    parent = _cancelled_token()
    with pytest.raises(muser.Cancelled):
        engine.tokenize("hello", cancel=muser.CancelToken(parent))


def test_an_untouched_token_changes_nothing(engine):
    assert engine.tokenize(BIG[:200_000], cancel=muser.CancelToken()) == engine.tokenize(BIG[:200_000])


def test_cancel_must_be_a_cancel_token(engine):
    with pytest.raises(TypeError, match="CancelToken"):
        engine.tokenize("hello", cancel=True)


@pytest.mark.real_model
@pytest.mark.parametrize("key", ["smollm2-135m", "gemma3-270m"])
def test_both_vocabularies_check_the_token(key, real_model_path):
    tok = _core.Tokenizer.from_file(real_model_path(key))
    for text in (BIG, " " * 1_000_000, "ab" * 500_000):
        with pytest.raises(muser.Cancelled):
            tok.encode(text, cancel=_cancelled_token())


def test_cancelling_from_another_thread_stops_a_call_in_progress(engine):
    text = BIG * 8  # 16 M characters: the longest prompt allowed
    started = time.perf_counter()
    engine.tokenize(text)
    full = time.perf_counter() - started

    token = muser.CancelToken()
    entered = threading.Event()
    outcome: list[BaseException | None] = []

    def run() -> None:
        entered.set()
        try:
            engine.tokenize(text, cancel=token)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001  (handed to the test thread)
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    entered.wait()
    token.cancel()
    cancelled_at = time.perf_counter()
    worker.join()
    assert isinstance(outcome[0], muser.Cancelled), outcome
    # Stopped within a check interval, not at the end: a small share of the full call.
    assert time.perf_counter() - cancelled_at < max(0.5 * full, 0.05), full


def test_generate_with_a_tiny_timeout_ends_while_tokenizing(engine):
    with pytest.raises(muser.DeadlineExceeded, match="while tokenizing the prompt"):
        muser.generate(engine, BIG, timeout=1e-9, max_tokens=1)


def test_stream_and_chat_end_the_same_way(engine):
    with pytest.raises(muser.DeadlineExceeded, match="while tokenizing"):
        muser.stream(engine, BIG, timeout=1e-9, max_tokens=1)
    with pytest.raises(muser.DeadlineExceeded, match="while tokenizing"):
        muser.chat(engine, [{"role": "user", "content": BIG}], template="{{ messages[0]['content'] }}",
                   timeout=1e-9, max_tokens=1)


def test_generate_with_a_cancelled_token_ends_while_tokenizing(engine):
    with pytest.raises(muser.Cancelled, match="cancelled while tokenizing its prompt"):
        muser.generate(engine, BIG, cancel=_cancelled_token(), max_tokens=1)


def test_openai_calls_tokenize_under_the_request_timeout(engine):
    from muser import openai

    with pytest.raises(muser.DeadlineExceeded, match="while tokenizing"):
        openai.create_completion(engine, BIG, timeout=1e-9, max_tokens=1)
    with pytest.raises(muser.DeadlineExceeded, match="while tokenizing"):
        openai.create_chat_completion(engine, [{"role": "user", "content": BIG}],
                                      template="{{ messages[0]['content'] }}", timeout=1e-9, max_tokens=1)


def test_a_prompt_that_tokenizes_in_time_still_generates(engine):
    assert isinstance(muser.generate(engine, "hello there", timeout=60, max_tokens=2), str)


def test_the_request_deadline_counts_from_the_call(engine):
    # A request built after a slow tokenization must not get a fresh timeout:
    # its producer's token inherits the deadline computed at the call.
    from muser import generation

    deadline = time.monotonic() - 1.0  # already past when the producer is built
    options = generation._options("generate", {"max_tokens": 1, "timeout": 5.0})
    pool = engine.default_pool()
    request = generation._Request(pool, [1, 2], options, None, 0, None, collect=True, deadline=deadline)
    assert request.cancel.deadline_passed
