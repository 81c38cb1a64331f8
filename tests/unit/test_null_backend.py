"""The null backend computes nothing: repeatable logits that are a fixed
function of (token, position), and a forward that takes as long as asked.
It is what scheduler and pool tests run sessions on."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import muser


@pytest.fixture
def path(tmp_path_factory):
    from tests.fixtures.tiny_models import write_tiny_model

    return write_tiny_model(
        tmp_path_factory.mktemp("null") / "llama.gguf", "llama", "F32", seed=0, context_length=1024
    )


def test_greedy_decoding_follows_token_plus_position_plus_one(path):
    engine = muser.Engine(path, backend="null")
    n_vocab = engine.config["n_vocab"]
    session = engine.session()
    session.prefill([5, 6, 7])
    token = int(np.argmax(session.logits))
    assert token == (7 + 2 + 1) % n_vocab
    for _ in range(5):
        position = session.n_past
        session.decode(token)
        expected = (token + position + 1) % n_vocab
        token = int(np.argmax(session.logits))
        assert token == expected


def test_logits_are_a_function_of_the_last_token_and_position_only(path):
    engine = muser.Engine(path, backend="null")
    a, b = engine.session(), engine.session()
    a.prefill([1, 2, 3])
    b.prefill([9, 8, 3])
    assert np.array_equal(a.logits, b.logits)
    assert len(set(a.logits.tolist())) == engine.config["n_vocab"]  # a strict ranking, no ties


def test_each_forward_takes_the_configured_step(path):
    engine = muser.Engine(path, backend="null", null_step_seconds=0.05)
    session = engine.session()
    started = time.perf_counter()
    session.prefill([t % 300 for t in range(600)])  # two chunks: 512 + 88 rows
    session.decode(1)
    assert time.perf_counter() - started >= 3 * 0.05


def test_forwards_of_different_sessions_take_turns(path):
    engine = muser.Engine(path, backend="null", null_step_seconds=0.1)
    sessions = [engine.session() for _ in range(2)]
    threads = [threading.Thread(target=s.decode, args=(1,)) for s in sessions]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.perf_counter() - started >= 0.2
    assert all(s.n_past == 1 for s in sessions)


def test_compute_releases_the_gil(path):
    engine = muser.Engine(path, backend="null", null_step_seconds=0.3)
    session = engine.session()
    ticks = 0
    worker = threading.Thread(target=session.decode, args=(1,))
    worker.start()
    while worker.is_alive():
        ticks += 1
        time.sleep(0.005)
    worker.join()
    assert ticks >= 20  # the main thread kept running Python during the forward


def test_a_failed_forward_changes_nothing(path):
    engine = muser.Engine(path, backend="null")
    session = engine.session()
    session.prefill([1, 2, 3])
    before = session.logits
    engine._core._arm_forward_fault(0, 0)
    with pytest.raises(muser.InternalError):
        session.prefill([t % 300 for t in range(700)])
    assert session.tokens == [1, 2, 3] and np.array_equal(session.logits, before)


def test_negative_step_is_rejected(path):
    with pytest.raises(ValueError, match="step_seconds"):
        muser.Engine(path, backend="null", null_step_seconds=-1.0)
