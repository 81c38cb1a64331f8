"""SlotAdmission: bounded FIFO admission to 1..4 slots, prefix-aware choice,
timeouts, cancellation and the unhealthy latch."""

from __future__ import annotations

import threading
import time

import pytest

import muser
from muser import _core


def _wait_until(predicate, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


@pytest.mark.parametrize("slots", [0, 5])
def test_slot_counts_outside_one_to_four_are_rejected(slots):
    with pytest.raises(ValueError, match="slots must be 1..4"):
        _core.SlotAdmission(slots, 64)


def test_the_65th_waiter_is_rejected_at_once_and_the_queue_is_served_in_order():
    admission = _core.SlotAdmission(1, 64)
    held = admission.acquire()
    order: list[int] = []

    def waiter(i: int):
        slot = admission.acquire()
        order.append(i)
        admission.release(slot)

    threads = []
    for i in range(64):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        _wait_until(lambda: admission.stats()["waiting"] == i + 1)  # arrival order is i
    started = time.monotonic()
    with pytest.raises(muser.Overloaded, match="64 callers are already waiting"):
        admission.acquire()
    assert time.monotonic() - started < 0.1
    admission.release(held)
    for t in threads:
        t.join(timeout=10)
    assert order == list(range(64))
    stats = admission.stats()
    assert stats["rejections"] == 1 and stats["admissions"] == 65 and stats["waiting"] == 0


def test_a_timeout_raises_timeout_error_and_leaves_the_queue():
    admission = _core.SlotAdmission(1, 4)
    admission.acquire()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        admission.acquire(timeout=0.05)
    assert 0.04 <= time.monotonic() - started < 2.0
    assert admission.stats()["waiting"] == 0


def test_the_free_slot_sharing_the_longest_prefix_is_chosen():
    admission = _core.SlotAdmission(3, 4)
    assert admission.acquire(prefix_lengths=[2, 7, 3]) == 1
    assert admission.acquire(prefix_lengths=[2, 99, 3]) == 2  # slot 1 is taken


def test_marking_unhealthy_wakes_waiters_and_latches_every_later_acquire():
    admission = _core.SlotAdmission(1, 4)
    admission.acquire()
    outcome: list = []

    def waiter():
        try:
            admission.acquire()
        except muser.Unhealthy as exc:
            outcome.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    _wait_until(lambda: admission.stats()["waiting"] == 1)
    admission.mark_unhealthy("a lease ended with the session in an unknown state")
    t.join(timeout=5)
    assert len(outcome) == 1 and "unknown state" in str(outcome[0])
    with pytest.raises(muser.Unhealthy):
        admission.acquire()
    assert not admission.healthy


def test_cancelling_a_waiter_frees_its_place_in_the_queue():
    admission = _core.SlotAdmission(1, 1)
    admission.acquire()
    token = _core.CancelToken()
    outcome: list = []
    t = threading.Thread(target=lambda: outcome.append(pytest.raises(muser.Cancelled, admission.acquire, cancel=token)))
    t.start()
    _wait_until(lambda: admission.stats()["waiting"] == 1)
    token.cancel()
    t.join(timeout=5)
    assert not t.is_alive() and admission.stats()["waiting"] == 0
    with pytest.raises(TimeoutError):  # the queue has room again: no Overloaded
        admission.acquire(timeout=0.01)


def test_releasing_a_slot_that_is_not_held_is_an_internal_error():
    with pytest.raises(muser.InternalError):
        _core.SlotAdmission(2, 4).release(1)
