"""Fairness and priority of the AcceleratorScheduler, driven from real threads.

Invariants, in words:
- the rotation rule: a decode is granted to the next waiting id after the
  last one served, wrapping to the smallest;
- a prefill chunk never starts while a decoder waits;
- no waiting decoder is passed over twice in a row: while it waits, nobody
  else is served twice;
- N hot decoders re-acquiring in a loop get turns within 1 of each other over
  any window;
- a decoder waits at most for the work in progress (one prefill chunk or one
  decode) plus the decoders ahead of it in the rotation.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import muser
from muser import _core

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


def _run(n_decoders: int, turns: int, step_s: float, prefill_chunks: int, prefill_step_s: float):
    scheduler = Scheduler(record_grants=True)
    start = threading.Barrier(n_decoders + (1 if prefill_chunks else 0))
    errors: list[BaseException] = []

    def guarded(body):
        def run():
            try:
                start.wait()
                body()
            except BaseException as exc:  # surfaced by the assertion below
                errors.append(exc)
        return run

    def decoder(sequence_id: int):
        for _ in range(turns):
            with scheduler.acquire_decode(sequence_id):
                time.sleep(step_s)

    def prefiller():
        for _ in range(prefill_chunks):
            with scheduler.acquire_prefill():
                time.sleep(prefill_step_s)

    threads = [threading.Thread(target=guarded(lambda i=i: decoder(i))) for i in range(n_decoders)]
    if prefill_chunks:
        threads.append(threading.Thread(target=guarded(prefiller)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), "a waiter hung"
    assert not errors, errors
    return scheduler.grant_log()


def _check_log(log, n_decoders: int):
    waiting_since: dict[int, Counter] = {}
    for record in log:
        waiting = record["waiting_decode"]
        if record["kind"] == "prefill":
            assert waiting == [], "a prefill chunk started while a decoder waited"
            continue
        (granted,) = record["granted"]
        assert granted == _reference_next(waiting, record["last_decode"]), record
        for d in waiting:
            if d == granted:
                waiting_since.pop(d, None)
                continue
            served = waiting_since.setdefault(d, Counter())
            served[granted] += 1
            assert served[granted] <= 1, f"decoder {d} was passed over twice by {granted}"
            assert sum(served.values()) <= n_decoders - 1, f"decoder {d} waited behind more than the others"
        for d in list(waiting_since):
            if d not in waiting:
                waiting_since.pop(d)


@settings(max_examples=12)
@given(n_decoders=st.integers(1, 4), turns=st.integers(3, 12),
       prefill_chunks=st.integers(0, 6), step_ms=st.sampled_from([1.0, 2.0]))
def test_decoders_are_served_in_rotation_and_prefill_yields_to_them(n_decoders, turns, prefill_chunks, step_ms):
    log = _run(n_decoders, turns, step_ms / 1000, prefill_chunks, 2 * step_ms / 1000)
    assert sum(r["kind"] == "decode" for r in log) == n_decoders * turns
    assert sum(r["kind"] == "prefill" for r in log) == prefill_chunks
    _check_log(log, n_decoders)


@pytest.mark.parametrize("n_decoders", [2, 3, 4])
def test_hot_decoders_get_turns_within_one_of_each_other_over_any_window(n_decoders):
    turns = 25
    log = _run(n_decoders, turns, 0.002, 0, 0)
    order = [r["granted"][0] for r in log]
    # Steady state: after everyone's first turn, until the first thread finishes.
    begin = max(order.index(d) for d in range(n_decoders))
    end = min(len(order) - 1 - order[::-1].index(d) for d in range(n_decoders))
    steady = order[begin:end + 1]
    assert len(steady) >= n_decoders * (turns - 3)
    for width in range(1, len(steady) + 1):
        for at in range(len(steady) - width + 1):
            counts = Counter(steady[at:at + width])
            turns_in_window = [counts.get(d, 0) for d in range(n_decoders)]
            assert max(turns_in_window) - min(turns_in_window) <= 1, (width, at, steady)


def test_decode_groups_take_one_permit_for_all_their_rows():
    scheduler = Scheduler(record_grants=True)
    with scheduler.acquire_decode_group([3, 1, 2]):
        pass
    (record,) = scheduler.grant_log()
    assert record["granted"] == [1, 2, 3]
    assert scheduler.stats()["decode_rows"] == 3 and scheduler.stats()["decode_grants"] == 1


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
