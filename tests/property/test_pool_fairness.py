"""Fairness of a whole SlotPool under random workloads (arrivals, prompt
lengths, cancellations, stalled consumers, deadlines), judged by
muser.testing's checkers on the engine's recorded schedule.

Invariants, in words:
- every request ends exactly once, with a finish reason or a typed error,
  and every lease and permit it took is given back;
- decoders take turns in the rotation; prefill never runs while one waits;
  a decoder waits at most one turn of each decoder ahead of it;
- callers get slots longest cached prefix first, nobody passed over more
  than the aging bound (ADMISSION_MAX_PASSED_OVER);
- prompt chunks shrink to 64 rows while generations are decoding;
- the batcher's groups list their slots in the cyclic rotation order.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import muser
from muser.testing import check_all, null_engine, run_workload, strategies


def _is_rotation_order(slots) -> bool:
    # Ascending, possibly wrapped once: e.g. (2, 3, 0, 1).
    drops = sum(1 for a, b in zip(slots, slots[1:]) if b <= a)
    return drops == 0 or (drops == 1 and slots[-1] < slots[0])


@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow])
@given(workload=strategies.workloads(max_requests=10, prefix_groups=2),
       slots=st.integers(1, 4), max_waiting=st.sampled_from([2, 64]))
def test_random_workloads_on_a_pool_keep_every_scheduling_rule(workload, slots, max_waiting):
    engine = null_engine(step_seconds=0.001, prefill_seconds_per_row=0.00001)
    pool = muser.SlotPool(engine, slots=slots, max_waiting=max_waiting)
    with engine.record_schedule() as log:
        results = run_workload(pool, workload, consumer_timeout=30)
    check_all(log)
    assert len(log.requests) == len(workload)
    for result in results:
        assert (result.finish_reason is None) != (result.error is None), result
        if result.error is not None:
            assert isinstance(result.error, (muser.Overloaded, TimeoutError, muser.Cancelled)), result.error
    for group in log.decode_groups:
        assert 1 <= len(group.slots) <= slots and _is_rotation_order(group.slots), group
    assert pool.stats()["admission"]["in_use"] == 0


@settings(max_examples=8, suppress_health_check=[HealthCheck.too_slow])
@given(workload=strategies.chat_and_documents(max_chats=6, max_documents=2))
def test_chats_beside_long_documents_get_short_chunks_and_their_turns(workload):
    engine = null_engine(step_seconds=0.001, prefill_seconds_per_row=0.00002)
    pool = muser.SlotPool(engine, slots=4)
    with engine.record_schedule() as log:
        results = run_workload(pool, workload, consumer_timeout=30)
    check_all(log)
    chats = [r for r in results if r.spec.kind == "chat"]
    assert all(r.error is None for r in chats), [r.error for r in chats]
