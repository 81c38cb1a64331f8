"""The DecodeBatcher coalesces concurrent decode steps into groups of <= 4
rows, in slot-rotation order, and never loses, duplicates or blocks a row."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import muser
from muser import _core


class Recorder:
    """A group runner that records every group and can be told to fail or stall."""

    def __init__(self, step_s: float = 0.0, fail_on_token: int | None = None):
        self.groups: list[list[tuple[int, int]]] = []
        self.step_s = step_s
        self.fail_on_token = fail_on_token
        self.lock = threading.Lock()

    def __call__(self, rows):
        with self.lock:
            self.groups.append([tuple(r) for r in rows])
        if self.step_s:
            time.sleep(self.step_s)
        if self.fail_on_token is not None and any(tok == self.fail_on_token for _, tok in rows):
            raise RuntimeError(f"group with token {self.fail_on_token} failed")


def _drive(batcher, n_streams: int, steps: int, errors: dict | None = None):
    for _ in range(n_streams):
        batcher.add_participant()

    def stream(slot: int):
        try:
            for step in range(steps):
                try:
                    batcher.submit(slot, slot * 1000 + step)
                except RuntimeError as exc:
                    if errors is None:
                        raise
                    errors[(slot, slot * 1000 + step)] = exc
        finally:
            batcher.remove_participant()

    threads = [threading.Thread(target=stream, args=(slot,)) for slot in range(n_streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a submitter hung"


def _is_rotation_order(slots: list[int]) -> bool:
    # Ascending, possibly wrapped once: e.g. [2, 3, 0, 1].
    drops = sum(1 for a, b in zip(slots, slots[1:]) if b <= a)
    return drops == 0 or (drops == 1 and slots[-1] < slots[0])


@settings(max_examples=10)
@given(n_streams=st.integers(1, 6), steps=st.integers(1, 15), max_rows=st.integers(1, 4))
def test_every_row_runs_exactly_once_in_groups_of_at_most_max_rows_in_rotation_order(n_streams, steps, max_rows):
    recorder = Recorder(step_s=0.0005)
    batcher = _core.DecodeBatcher(recorder, window_us=250, max_rows=max_rows)
    _drive(batcher, n_streams, steps)
    rows = [row for group in recorder.groups for row in group]
    assert Counter(rows) == Counter((s, s * 1000 + k) for s in range(n_streams) for k in range(steps))
    for group in recorder.groups:
        assert 1 <= len(group) <= max_rows
        assert len({slot for slot, _ in group}) == len(group)
        assert _is_rotation_order([slot for slot, _ in group]), group
    stats = batcher.stats()
    assert stats["rows"] == n_streams * steps and stats["groups"] == len(recorder.groups)


def test_concurrent_streams_form_groups_larger_than_one():
    recorder = Recorder(step_s=0.002)
    batcher = _core.DecodeBatcher(recorder, window_us=250, max_rows=4)
    _drive(batcher, 4, 20)
    sizes = batcher.stats()["group_size_counts"]
    assert sum(sizes[2:]) > 0, sizes
    assert sizes[4] > 0, sizes


def test_a_group_error_reaches_every_owner_of_that_group_and_nobody_else():
    recorder = Recorder(step_s=0.001, fail_on_token=2005)
    batcher = _core.DecodeBatcher(recorder, window_us=250, max_rows=4)
    errors: dict = {}
    _drive(batcher, 4, 10, errors)
    (failed_group,) = [g for g in recorder.groups if any(tok == 2005 for _, tok in g)]
    assert set(errors) == set(failed_group)
    assert all("token 2005" in str(exc) for exc in errors.values())
    assert batcher.stats()["failed_groups"] == 1


def test_a_cancelled_queued_job_is_withdrawn_and_never_runs():
    release = threading.Event()
    ran: list = []

    def slow_runner(rows):
        ran.extend(tuple(r) for r in rows)
        release.wait(5)

    batcher = _core.DecodeBatcher(slow_runner, window_us=0, max_rows=1)
    first = threading.Thread(target=lambda: batcher.submit(0, 1))
    first.start()
    deadline = time.monotonic() + 5
    while not ran and time.monotonic() < deadline:
        time.sleep(0.001)
    token = _core.CancelToken()
    outcome: list = []

    def cancelled_submitter():
        try:
            batcher.submit(1, 2, cancel=token)
        except muser.Cancelled as exc:
            outcome.append(exc)

    second = threading.Thread(target=cancelled_submitter)
    second.start()
    time.sleep(0.02)
    started = time.monotonic()
    token.cancel()
    second.join(timeout=5)
    assert time.monotonic() - started < 1.0
    assert len(outcome) == 1
    release.set()
    first.join(timeout=5)
    assert ran == [(0, 1)]
    assert batcher.stats()["cancelled_in_queue"] == 1


def test_a_single_stream_is_not_delayed_by_the_rendezvous_window():
    batcher = _core.DecodeBatcher(Recorder(), window_us=1_000_000, max_rows=4)  # a 1 s window
    batcher.add_participant()
    started = time.monotonic()
    for step in range(20):
        batcher.submit(0, step)
    assert time.monotonic() - started < 0.5  # it never waits for rows that cannot come


@pytest.mark.parametrize("max_rows", [0, 5])
def test_max_rows_outside_one_to_four_is_rejected(max_rows):
    with pytest.raises(ValueError, match="max_rows"):
        _core.DecodeBatcher(Recorder(), window_us=250, max_rows=max_rows)


def test_streams_that_come_back_one_after_another_still_share_groups():
    # Each stream "thinks" 0.6 ms between steps holding a shared lock, as
    # Python generation threads do under the GIL: they return staggered, far
    # beyond a 250 us window. The batcher learns that think time and waits
    # for them (capped at 2 ms), so most groups carry more than two rows.
    think_lock = threading.Lock()
    batcher = _core.DecodeBatcher(Recorder(step_s=0.001), window_us=250, max_rows=4)
    for _ in range(4):
        batcher.add_participant()

    def stream(slot: int):
        try:
            for step in range(40):
                with think_lock:
                    time.sleep(0.0006)
                batcher.submit(slot, step)
        finally:
            batcher.remove_participant()

    threads = [threading.Thread(target=stream, args=(slot,)) for slot in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    stats = batcher.stats()
    sizes = stats["group_size_counts"]
    assert sizes[3] + sizes[4] > sizes[1] + sizes[2], sizes
    assert 0 < stats["think_time_ns"]
