"""Serving faults (issue 14 items 5-11): a paused consumer keeps its slot while
nobody waits, a released Slot refuses to act, one row's error stays in its
row, reads never hold the GIL while blocking, direct Slot users are packed,
the unhealthy latch is complete, and the prefill chunk rule looks at decoders
that are decoding now."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import muser
from tests.fixtures.driving import run_in_threads
from tests.fixtures.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("faults") / "llama.gguf", weight_type="Q8_0",
                            context_length=4096)
    return muser.Engine(path, threads=2)


@pytest.fixture
def slow_engine(tmp_path):
    path = write_tiny_model(tmp_path / "slow.gguf", context_length=4096)
    return muser.Engine(path, threads=1, backend="null", null_step_seconds=0.01)


# -- item 5 ----------------------------------------------------------------------

def test_a_paused_consumer_keeps_its_slot_while_nobody_waits(tiny):
    pool = muser.SlotPool(tiny, slots=2, max_context=4096)
    iterator = muser.stream(pool, [1, 2, 3], max_tokens=300, temperature=0, consumer_timeout=0.2)
    chunks = [next(iterator)]
    time.sleep(1.0)  # five grace periods with a full channel, but nobody wants the slot
    chunks += list(iterator)
    assert chunks[-1].finish_reason in ("length", "stop")
    assert pool.stats()["requests"]["cancelled"] == 0


def test_a_paused_consumer_is_cancelled_once_someone_waits_and_the_grace_period_passed(tiny):
    pool = muser.SlotPool(tiny, slots=1, max_context=4096)
    iterator = muser.stream(pool, [1, 2, 3], max_tokens=300, temperature=0, consumer_timeout=0.2)
    next(iterator)
    time.sleep(0.5)  # stalled past the grace period, but nobody waited: still running
    assert pool.stats()["admission"]["in_use"] == 1
    with pool.acquire(timeout=10):  # now someone waits: the stalled request gives way
        pass
    with pytest.raises(muser.Cancelled, match="waited for a slot"):
        list(iterator)


# -- item 6 ----------------------------------------------------------------------

def test_a_released_slot_refuses_every_operation_and_the_next_owner_is_untouched(tiny):
    pool = muser.SlotPool(tiny, slots=1, max_context=256)
    with pool.acquire() as stale:
        stale.prefill([1, 2, 3])
    with pool.acquire([7, 8]) as slot:
        slot.prefill([7, 8][slot.reused_tokens:])
        for use in (lambda: stale.decode(4), lambda: stale.prefill([5]), lambda: stale.context_shift(0),
                    lambda: stale.logits, lambda: stale.session):
            with pytest.raises(muser.SlotReleased):
                use()
        assert slot.tokens == [7, 8]


# -- item 7 ----------------------------------------------------------------------

def test_one_rows_bad_token_or_context_overflow_never_fails_the_rows_packed_with_it(tiny):
    n_vocab = tiny.config["n_vocab"]
    # A long window so every step of the three streams forms one group.
    pool = muser.SlotPool(tiny, slots=3, max_context=16, batch_window_us=200_000)
    barrier = threading.Barrier(3)
    errors: dict[int, list[str]] = {0: [], 1: [], 2: []}

    def client(i: int) -> None:
        with pool.acquire() as slot:
            slot.prefill([1 + i, 2, 3] if i < 2 else [3] * 8)
            barrier.wait()
            for step in range(10):
                token = n_vocab + 5 if (i == 1 and step == 2) else 4 + step
                try:
                    slot.decode(token)  # client 2 reaches its 16-token limit after step 7
                except (ValueError, muser.ContextOverflow) as exc:
                    errors[i].append(type(exc).__name__)

    run_in_threads(client, 3)
    assert errors == {0: [], 1: ["ValueError"], 2: ["ContextOverflow", "ContextOverflow"]}
    counts = pool.stats()["batcher"]["group_size_counts"]
    assert counts[3] >= 1, counts  # the bad row was packed with good ones


def test_a_row_at_its_context_limit_fails_alone(tiny):
    pool = muser.SlotPool(tiny, slots=2, max_context=8, batch_window_us=200_000)
    barrier = threading.Barrier(2)
    outcome: dict[int, list] = {0: [], 1: []}

    def client(i: int) -> None:
        with pool.acquire() as slot:
            slot.prefill([1, 2, 3, 4, 5, 6] if i == 1 else [1])
            barrier.wait()
            for step in range(4):
                try:
                    slot.decode(7)
                    outcome[i].append("ok")
                except muser.ContextOverflow:
                    outcome[i].append("overflow")

    run_in_threads(client, 2)
    assert outcome[0] == ["ok"] * 4
    assert outcome[1] == ["ok", "ok", "overflow", "overflow"]


# -- item 8 ----------------------------------------------------------------------

@pytest.mark.parametrize("read", ["tokens", "n_past", "kv_bytes"])
def test_reading_a_session_during_another_threads_prefill_does_not_hold_the_gil(tmp_path, read):
    engine = muser.Engine(write_tiny_model(tmp_path / "m.gguf", context_length=4096), threads=1,
                          backend="null", null_step_seconds=0.1)
    session = engine.session(max_context=4096)
    prefill = threading.Thread(target=session.prefill, args=([1] * 3000,))  # 6 chunks: 0.6 s
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    prefill.start()
    time.sleep(0.05)  # the prefill holds the session's lock now
    counter.start()
    before = ticks[0]
    getattr(session, read)  # waits for the prefill to finish
    during = ticks[0] - before
    stop.set()
    counter.join()
    prefill.join()
    assert during > 50, f"other Python threads ran {during} times while {read} waited"


# -- item 9 ----------------------------------------------------------------------

def test_threads_driving_slots_directly_are_packed_into_groups(tiny):
    pool = muser.SlotPool(tiny, slots=2, max_context=256, batch_window_us=100_000)
    steps = 12
    barrier = threading.Barrier(2)

    def client(i: int) -> None:
        with pool.acquire() as slot:
            slot.prefill([1 + i, 2])
            barrier.wait()
            for step in range(steps):
                slot.decode(int(np.argmax(slot.logits)))

    run_in_threads(client, 2)
    counts = pool.stats()["batcher"]["group_size_counts"]
    # All but the steps at the ends (one client starts or finishes first) ran in pairs.
    assert counts[2] >= steps - 2, counts


# -- item 10 ---------------------------------------------------------------------

def test_an_internal_error_while_rewinding_in_acquire_latches_the_pool_with_a_readable_reason(tiny, tmp_path):
    engine = muser.Engine(write_tiny_model(tmp_path / "m.gguf", weight_type="Q8_0"), threads=1)
    pool = muser.SlotPool(engine, slots=1, max_context=64)
    with pool.acquire() as slot:
        slot.prefill([1, 2, 3, 4, 5, 6])
    engine._core._arm_forward_fault(0, 0)  # the rewind's one-row forward fails
    with pytest.raises(muser.InternalError):
        pool.acquire([1, 2, 3])
    assert not pool.healthy
    assert "rewinding slot 0" in pool.unhealthy_reason
    with pytest.raises(muser.Unhealthy, match="rewinding"):
        pool.acquire()


def test_leases_already_held_stop_when_the_pool_latches(tiny):
    pool = muser.SlotPool(tiny, slots=2, max_context=64)
    assert pool.healthy and pool.unhealthy_reason == ""
    with pool.acquire() as survivor:
        survivor.prefill([1, 2])
        broken = pool.acquire()
        broken.release(healthy=False)
        with pytest.raises(muser.Unhealthy, match="unknown state"):
            survivor.decode(3)
        with pytest.raises(muser.Unhealthy):
            survivor.prefill([4])
    assert "slot 1" in pool.unhealthy_reason


# -- item 11 ---------------------------------------------------------------------

def test_an_idle_engine_prefills_in_full_chunks_even_after_decoding_long_ago(slow_engine):
    decoder = slow_engine.session(max_context=4096)
    decoder.prefill([1, 2])
    decoder.decode(3)
    time.sleep(0.2)  # the decoder is done; nobody decodes now
    before = slow_engine.scheduler_stats()
    slow_engine.session(max_context=4096).prefill([1] * 1024)
    after = slow_engine.scheduler_stats()
    assert after["prefill_grants"] - before["prefill_grants"] == 2  # 512 + 512, not 64 + 512 + 448
    assert after["prefill_chunks_contended"] == before["prefill_chunks_contended"]


# -- the batcher's runner ------------------------------------------------------------

def test_a_failure_in_the_batchers_bookkeeping_fails_every_queued_row_instead_of_hanging(tiny):
    pool = muser.SlotPool(tiny, slots=3, max_context=64, batch_window_us=200_000)
    barrier = threading.Barrier(3)
    outcome: dict[int, str] = {}

    def client(i: int) -> None:
        with pool.acquire() as slot:
            slot.prefill([1 + i])
            slot.decode(2)  # registers as a participant
            barrier.wait()
            if i == 0:
                pool._core._arm_batcher_fault()
            barrier.wait()
            try:
                slot.decode(3)
                outcome[i] = "ok"
            except muser.InternalError as exc:
                outcome[i] = "internal" if "runner failed" in str(exc) else str(exc)
            slot.decode(4)  # the batcher works again afterwards

    run_in_threads(client, 3, timeout=30)
    assert outcome == {0: "internal", 1: "internal", 2: "internal"}
