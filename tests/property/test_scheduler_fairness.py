"""Fairness and priority of the AcceleratorScheduler, driven from real threads
through real sessions of a null engine and judged with muser.testing's
checkers on the recorded schedule (the same API users test their apps with).

Invariants, in words:
- the rotation rule: a decode is granted to the next waiting id after the
  last one served, wrapping to the smallest;
- a prefill chunk never starts while a decoder waits;
- no waiting decoder is passed over twice: while it waits, nobody else gets
  the turn twice, so it waits at most for the work in progress (one prefill
  chunk or one decode) plus the decoders ahead of it in the rotation;
- a hot decoder gets a second turn in a row only when nobody else waits;
- a decode group whose members straddle a waiting decoder does not starve it.
"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import muser
from muser import _core
from muser.testing import (
    check_bounded_decode_wait,
    check_each_request_ended_once,
    check_no_prefill_while_decoder_waits,
    check_no_starvation,
    check_rotation,
    null_engine,
)

Scheduler = _core.AcceleratorScheduler


def _reference_next(waiting: list[int], last: int | None) -> int | None:
    if not waiting:
        return None
    after = [w for w in sorted(waiting) if last is not None and w > last]
    return after[0] if after else min(waiting)


@given(st.sets(st.integers(0, 50)), st.none() | st.integers(0, 50))
def test_rotation_picks_the_next_waiting_id_after_the_last_served_wrapping_to_the_smallest(waiting, last):
    assert Scheduler.select_next_decode(sorted(waiting), last) == _reference_next(sorted(waiting), last)


@given(st.booleans(), st.integers(0, 5000))
def test_prefill_chunks_are_512_rows_until_a_decoder_waits_then_64(decode_waiting, remaining):
    expected = min(remaining, 64 if decode_waiting else 512)
    assert Scheduler.prefill_chunk_rows(decode_waiting, remaining) == expected
    assert _core.PREFILL_CHUNK_ROWS == 512 and _core.PREFILL_CHUNK_ROWS_CONTENDED == 64


def _run(n_decoders: int, turns: int, step_s: float, prefill_rows: int):
    """Real sessions of a null engine, one thread each: decoders decode `turns`
    tokens, a prefiller (if any) prefills `prefill_rows` tokens; returns the
    recorded schedule and the decoders' session ids."""
    engine = null_engine(step_seconds=step_s, prefill_seconds_per_row=step_s / 64)
    decoders = [engine.session() for _ in range(n_decoders)]
    prefiller = engine.session() if prefill_rows else None
    for session in decoders:
        session.prefill([270])
    start = threading.Barrier(n_decoders + (1 if prefiller else 0))
    errors: list[BaseException] = []

    def guarded(body):
        def run():
            try:
                start.wait()
                body()
            except BaseException as exc:  # surfaced by the assertion below
                errors.append(exc)
        return run

    def decode(session):
        for turn in range(turns):
            session.decode(271 + turn % 20)

    threads = [threading.Thread(target=guarded(lambda s=s: decode(s))) for s in decoders]
    if prefiller is not None:
        threads.append(threading.Thread(target=guarded(lambda: prefiller.prefill([272] * prefill_rows))))
    with engine.record_schedule() as log:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), "a waiter hung"
    assert not errors, errors
    return log, [s.id for s in decoders]


@settings(max_examples=12)
@given(n_decoders=st.integers(1, 4), turns=st.integers(3, 12),
       prefill_rows=st.sampled_from([0, 40, 300, 700]), step_ms=st.sampled_from([1.0, 2.0]))
def test_decoders_are_served_in_rotation_and_prefill_yields_to_them(n_decoders, turns, prefill_rows, step_ms):
    log, _ = _run(n_decoders, turns, step_ms / 1000, prefill_rows)
    grants = log.grants()
    assert sum(p.kind == "decode" for p in grants) == n_decoders * turns
    assert sum(p.rows for p in grants if p.kind == "prefill") == prefill_rows
    check_each_request_ended_once(log)
    check_rotation(log)
    check_no_prefill_while_decoder_waits(log)
    check_bounded_decode_wait(log, max_grants_ahead=n_decoders)
    check_no_starvation(log)


@pytest.mark.parametrize("n_decoders", [2, 3, 4])
def test_a_hot_decoder_gets_a_second_turn_in_a_row_only_when_nobody_else_waits(n_decoders):
    # Wall-clock shares depend on how fast each thread comes back (a loaded
    # machine delays some); what the scheduler owes is stated on the log.
    log, ids = _run(n_decoders, 25, 0.002, 0)
    grants = log.grants()
    assert sorted(s for p in grants for s in p.sessions) == sorted(ids * 25)
    for first, second in zip(grants, grants[1:]):
        if first.sessions != second.sessions:
            continue
        others = [p for p in log.permits
                  if p is not second and p.requested.seq < second.granted.seq < p.granted.seq]
        assert not others, (f"{second.describe()} got a second turn in a row at {second.granted} while "
                            f"{[p.describe() for p in others]} waited")
    check_rotation(log)
    check_bounded_decode_wait(log, max_grants_ahead=n_decoders - 1)


def test_decode_groups_take_one_permit_for_all_their_rows():
    engine = null_engine(step_seconds=0.0)
    sessions = [engine.session() for _ in range(3)]
    for session in sessions:
        session.prefill([270])
    with engine.record_schedule() as log:
        engine.decode_group([sessions[2], sessions[0], sessions[1]], [271, 272, 273])
    (permit,) = log.permits
    assert permit.kind == "decode" and permit.rows == 3
    assert permit.sessions == tuple(sorted(s.id for s in sessions))
    assert engine.scheduler_stats()["decode_rows"] == 3


@pytest.mark.parametrize("ids", [[], [1, 2, 3, 4, 5], [1, 1]])
def test_decode_groups_outside_one_to_four_distinct_rows_are_rejected(ids):
    with pytest.raises(ValueError, match="decode group"):
        Scheduler().acquire_decode_group(ids)


def test_a_poisoned_scheduler_raises_unhealthy_for_waiters_and_later_callers():
    scheduler = Scheduler()
    permit = scheduler.acquire_prefill()
    outcome: list[BaseException] = []

    def waiter():
        try:
            scheduler.acquire_decode(7)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    deadline = time.monotonic() + 5
    while scheduler.waiting_decode() != [7] and time.monotonic() < deadline:
        time.sleep(0.001)
    permit.poison("forward failed mid-way")
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], muser.Unhealthy)
    assert "forward failed mid-way" in str(outcome[0])
    with pytest.raises(muser.Unhealthy):
        scheduler.acquire_prefill()
    assert scheduler.poisoned and scheduler.waiting_decode() == []


def test_the_permit_releases_when_its_with_block_raises():
    scheduler = Scheduler()
    with pytest.raises(RuntimeError):
        with scheduler.acquire_decode(1):
            raise RuntimeError("user code failed")
    with scheduler.acquire_prefill() as permit:  # would block forever if still held
        assert permit.held


def test_the_same_sequence_cannot_wait_twice():
    scheduler = Scheduler()
    blocker = scheduler.acquire_prefill()
    thread = threading.Thread(target=lambda: scheduler.acquire_decode(5).release())
    thread.start()
    deadline = time.monotonic() + 5
    while scheduler.waiting_decode() != [5] and time.monotonic() < deadline:
        time.sleep(0.001)
    with pytest.raises(ValueError, match="already waiting"):
        scheduler.acquire_decode(5)
    blocker.release()
    thread.join(timeout=5)
    assert not thread.is_alive()


def _wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert condition()


def test_a_group_that_passes_a_waiting_decoder_hands_it_the_next_turn():
    # Group {1, 4} is granted while 3 waits (1 is selected; 4 rides along,
    # passing 3). When the group asks again, 3 goes first: the cursor stops
    # before the waiter it passed. (It used to move to 4, so the rotation
    # wrapped to 1 and the group passed 3 on every turn.)
    scheduler = Scheduler()
    order: list[tuple[int, ...]] = []
    blocker = scheduler.acquire_prefill()
    release_first = threading.Event()

    def take(ids, hold: threading.Event | None = None):
        with scheduler.acquire_decode_group(list(ids)):
            order.append(tuple(ids))
            if hold is not None:
                hold.wait(10)

    first = threading.Thread(target=take, args=((1, 4), release_first))
    single = threading.Thread(target=take, args=((3,),))
    first.start()
    single.start()
    _wait_until(lambda: scheduler.waiting_decode() == [1, 3, 4])
    blocker.release()
    _wait_until(lambda: order == [(1, 4)])
    again = threading.Thread(target=take, args=((1, 4),))
    again.start()
    _wait_until(lambda: scheduler.waiting_decode() == [1, 3, 4])
    release_first.set()
    for thread in (first, single, again):
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert order == [(1, 4), (3,), (1, 4)]


def test_decoders_straddled_by_a_decode_group_are_not_starved():
    engine = null_engine(step_seconds=0.002)
    sessions = [engine.session() for _ in range(5)]
    for session in sessions:
        session.prefill([270])
    a, _, c, d, e = sessions

    def group():
        for _ in range(15):
            engine.decode_group([a, d], [271, 272])

    def single(session):
        for _ in range(15):
            session.decode(273)

    threads = [threading.Thread(target=group), threading.Thread(target=single, args=(c,)),
               threading.Thread(target=single, args=(e,))]
    with engine.record_schedule() as log:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    check_rotation(log)
    check_bounded_decode_wait(log)
    check_no_starvation(log)
