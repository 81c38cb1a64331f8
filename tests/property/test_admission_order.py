"""The admission order (csrc/serve/admission_policy.h), stated in words first:

- with a free slot, the waiter whose prompt has the longest cached prefix goes
  first; ties go to whoever came first;
- aging: no waiter is ever passed over (someone who arrived later admitted
  first) more than ADMISSION_MAX_PASSED_OVER times;
- beyond ADMISSION_FCFS_ABOVE_WAITERS waiters the queue is first come, first served.

The pure rule is driven by hypothesis through arbitrary arrival/admission
interleavings; the threaded SlotAdmission is checked to follow it."""

from __future__ import annotations

import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from muser import _core

MAX_PASSED = _core.ADMISSION_MAX_PASSED_OVER
FCFS_ABOVE = _core.ADMISSION_FCFS_ABOVE_WAITERS

# A schedule: each event either adds a waiter (with its cached prefix) or admits one.
events = st.lists(st.one_of(st.tuples(st.just("arrive"), st.integers(0, 64)), st.just(("admit", 0))),
                  max_size=300)


def _simulate(schedule):
    """Run the rule over `schedule`; returns (admission order, max passed-over seen)."""
    waiting: list[dict] = []  # arrival order
    arrivals = 0
    admitted: list[int] = []
    worst = 0
    for kind, prefix in schedule:
        if kind == "arrive":
            waiting.append({"id": arrivals, "prefix": prefix, "passed": 0})
            arrivals += 1
        elif waiting:
            index = _core.next_waiter([(w["prefix"], w["passed"]) for w in waiting])
            chosen = waiting.pop(index)
            for earlier in waiting[:index]:  # everyone older than the chosen one was passed over
                earlier["passed"] += 1
                worst = max(worst, earlier["passed"])
            admitted.append(chosen["id"])
    return admitted, worst


@settings(max_examples=300)
@given(events)
def test_no_waiter_is_passed_over_more_than_the_bound(schedule):
    _, worst = _simulate(schedule)
    assert worst <= MAX_PASSED


@settings(max_examples=100)
@given(st.lists(st.integers(0, 64), min_size=1, max_size=40))
def test_among_fresh_waiters_the_longest_cached_prefix_goes_first_ties_by_arrival(prefixes):
    index = _core.next_waiter([(p, 0) for p in prefixes])
    assert prefixes[index] == max(prefixes)
    assert index == prefixes.index(max(prefixes))


@settings(max_examples=50)
@given(st.lists(st.integers(0, 64), min_size=FCFS_ABOVE + 1, max_size=FCFS_ABOVE + 20))
def test_beyond_the_fcfs_threshold_the_oldest_waiter_goes_first(prefixes):
    assert _core.next_waiter([(p, 0) for p in prefixes]) == 0


def test_a_starved_waiter_goes_before_a_better_cached_one():
    assert _core.next_waiter([(0, 0), (0, MAX_PASSED), (50, 0)]) == 1


def test_slot_admission_admits_the_longest_cached_prefix_first_then_ages():
    admission = _core.SlotAdmission(1, 64)
    held = admission.acquire()
    order: list[str] = []

    def waiter(name: str, prefix: int):
        slot = admission.acquire(prefix_lengths=[prefix])
        order.append(name)
        admission.release(slot)

    threads = []
    for n, (name, prefix) in enumerate([("cold", 0), ("warm", 9), ("warmer", 12)]):
        t = threading.Thread(target=waiter, args=(name, prefix))
        t.start()
        threads.append(t)
        while admission.stats()["waiting"] < n + 1:
            time.sleep(0.002)
    admission.release(held)
    for t in threads:
        t.join(timeout=10)
    assert order == ["warmer", "warm", "cold"]


def test_slot_admission_never_passes_a_waiter_over_more_than_the_bound():
    admission = _core.SlotAdmission(1, 64)
    held = admission.acquire()
    order: list[str] = []
    lock = threading.Lock()

    def waiter(name: str, prefix: int):
        slot = admission.acquire(prefix_lengths=[prefix])
        with lock:
            order.append(name)
        admission.release(slot)

    # The cold waiter arrives first; then a stream of better-cached ones.
    threads = [threading.Thread(target=waiter, args=("cold", 0))]
    threads[0].start()
    while admission.stats()["waiting"] < 1:
        time.sleep(0.002)
    for i in range(MAX_PASSED + 4):
        t = threading.Thread(target=waiter, args=(f"warm{i}", 10))
        t.start()
        threads.append(t)
        while admission.stats()["waiting"] < i + 2:
            time.sleep(0.002)
    admission.release(held)
    for t in threads:
        t.join(timeout=10)
    assert order.index("cold") == MAX_PASSED
