"""A property test an application writes for its own traffic: short chats
arriving beside long documents being summarized, on one 4-slot pool.

It needs only `pip install muser pytest hypothesis`; copy it into your tests
and run `pytest`. muser.testing's null engine runs muser's real scheduler,
sessions, pool and batcher on a backend that only sleeps, so the test is
fast and needs no model download; the recorded schedule is then checked
against muser's fairness rules, and your own expectations on top.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import muser
from muser.testing import (
    RequestSpec,
    ScheduleLog,
    Workload,
    check_all,
    null_engine,
    run_workload,
    strategies,
)

# Our traffic: chats with short prompts and answers, documents of up to ~1,500 tokens.
chat = strategies.requests(
    "chat",
    prompt=strategies.prompt_lengths(1, 48),
    tokens=strategies.max_tokens(4, 24),
    stall=strategies.consumer_stalls(0.01),
    deadline=st.none(),
)
document = strategies.requests(
    "document",
    prompt=strategies.prompt_lengths(300, 1500),
    tokens=strategies.max_tokens(1, 8),
    cancel=st.none(),
    stall=st.just(0.0),
    deadline=st.none(),
)
traffic = st.tuples(st.lists(chat, min_size=1, max_size=8), st.lists(document, min_size=1, max_size=2)).map(
    lambda parts: Workload(tuple(parts[0] + parts[1]))
)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=traffic)
def test_chats_stay_responsive_while_documents_are_summarized(workload: Workload) -> None:
    # 2 ms per decode step, 20 us per prompt token: a 1,500-token document is
    # ~30 ms of prefill, which must be chopped up so chats keep decoding.
    engine = null_engine(step_seconds=0.002, prefill_seconds_per_row=0.00002)
    pool = muser.SlotPool(engine, slots=4)
    with engine.record_schedule() as log:
        results = run_workload(pool, workload)

    # muser's promises: rotation among decoders, no prefill while one waits,
    # bounded waits, no starvation, 64-row chunks while decoding, every
    # request ended once. A failure explains which rule broke, when, and who.
    check_all(log)

    # Ours: every chat finished (normally or because its caller cancelled it).
    for result in results:
        if result.spec.kind == "chat":
            assert result.error is None, f"chat {result.index} failed: {result.error!r}"
            assert result.finish_reason in ("stop", "length", "cancelled")


def test_a_burst_of_chats_behind_one_document(muser_pool: muser.SlotPool, muser_schedule_log: ScheduleLog) -> None:
    """The same check with the fixtures muser registers for pytest."""
    burst = Workload((RequestSpec(0.0, 1200, 2, kind="document"),)
                     + tuple(RequestSpec(0.001, 20, 10) for _ in range(6)))
    run_workload(muser_pool, burst)
    check_all(muser_schedule_log)
    chunks = [p.rows for p in muser_schedule_log.grants() if p.kind == "prefill" and p.rows]
    assert sum(chunks) >= 1200 and max(chunks) <= 512
