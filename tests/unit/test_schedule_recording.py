"""engine.record_schedule(): what the core records of permits, admissions,
leases, decode groups, cancellations and requests, and the null engine of
muser.testing that tests run it on."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import muser
from muser.testing import check_all, null_engine, null_model_path
from muser.testing.null_model import NULL_MODEL_CONTEXT, null_model_bytes


def test_muser_testing_imports_without_pytest_or_hypothesis():
    code = (
        "import sys, muser.testing\n"
        "assert 'pytest' not in sys.modules and 'hypothesis' not in sys.modules, sorted(sys.modules)\n"
        "print(muser.testing.null_engine().backend)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "null"


def test_the_null_model_is_written_once_deterministically_and_loads(tmp_path):
    assert null_model_bytes() == null_model_bytes()
    path = null_model_path(tmp_path)
    assert null_model_path(tmp_path) == path and path.read_bytes() == null_model_bytes()
    engine = muser.Engine(path, backend="null")
    assert engine.config["context_length"] == NULL_MODEL_CONTEXT
    assert engine.detokenize(engine.tokenize("hello world 42")) == "hello world 42"
    reply = muser.chat(engine, [{"role": "user", "content": "hi"}], max_tokens=3, temperature=0)
    assert isinstance(reply, str)


def test_null_engine_follows_the_null_backends_greedy_rule():
    engine = null_engine(step_seconds=0.0)
    session = engine.session()
    session.prefill([270, 271, 272])
    assert int(np.argmax(session.logits)) == (272 + 2 + 1) % engine.n_vocab


def test_prefill_seconds_per_row_adds_time_per_prompt_row_only():
    engine = null_engine(step_seconds=0.0, prefill_seconds_per_row=0.001)
    session = engine.session()
    started = time.perf_counter()
    session.prefill([270] * 200)
    prefill_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(20):
        session.decode(270)
    decode_s = time.perf_counter() - started
    assert prefill_s >= 0.2
    assert decode_s < prefill_s  # 20 one-row decodes cost no per-row time


def test_negative_times_are_rejected():
    with pytest.raises(ValueError, match="prefill_seconds_per_row"):
        null_engine(prefill_seconds_per_row=-1.0)
    with pytest.raises(ValueError, match="step_seconds"):
        null_engine(step_seconds=float("nan"))


def test_permits_record_kind_sessions_rows_and_requested_granted_released_in_order():
    engine = null_engine(step_seconds=0.0)
    a, b = engine.session(), engine.session()
    with engine.record_schedule() as log:
        a.prefill([270] * 600)  # 512 + 88 rows: nobody decodes
        b.prefill([271])
        engine.decode_group([a, b], [272, 273])
        a.decode(274)
    permits = log.permits
    assert [(p.kind, p.sessions, p.rows) for p in permits] == [
        ("prefill", (a.id,), 512), ("prefill", (a.id,), 88), ("prefill", (b.id,), 1),
        ("decode", (a.id, b.id), 2), ("decode", (a.id,), 1),
    ]
    for p in permits:
        assert p.requested.seq < p.granted.seq < p.released.seq
        assert p.requested.time <= p.granted.time <= p.released.time
        assert p.refused is None
    assert [p.contended for p in permits if p.kind == "prefill"] == [False, False, False]
    check_all(log)


def test_recording_is_off_outside_the_block_and_one_at_a_time():
    engine = null_engine(step_seconds=0.0)
    session = engine.session()
    session.prefill([270])
    with engine.record_schedule() as log:
        with pytest.raises(ValueError, match="already recording"):
            with engine.record_schedule():
                pass
        session.decode(271)
        assert len(log.permits) == 1  # live inside the block
    session.decode(272)
    assert len(log.permits) == 1 and not log.recording
    assert engine._core.schedule_recorder.recording is False


def test_pool_admissions_leases_decode_groups_and_requests_are_recorded():
    engine = null_engine(step_seconds=0.005)
    pool = muser.SlotPool(engine, slots=2)
    with engine.record_schedule() as log:
        # 40 steps of 5 ms each: the two completions overlap even when a loaded
        # machine starts the second one late, so a 2-row group must appear.
        texts = muser.generate(pool, [270, 271, 272], n=2, max_tokens=40, temperature=0)
        muser.generate(pool, [270, 271, 272, 280], max_tokens=2, temperature=0)
    assert len(texts) == 2
    admissions = log.admissions
    assert [a.ticket for a in admissions] == [1, 2, 3]
    assert all(a.pool == pool._core.id and a.admitted and a.released and a.release_state == "healthy"
               for a in admissions)
    assert sorted(a.slot for a in admissions[:2]) == [0, 1]
    assert admissions[2].reused_tokens == 3  # the slot held the shared 3-token prefix
    slot_sessions = {pool._core.session(i).id for i in range(2)}
    assert {a.session for a in admissions} <= slot_sessions
    groups = log.decode_groups
    assert groups and all(g.pool == pool._core.id for g in groups)
    assert max(len(g.slots) for g in groups) == 2 and all(set(g.sessions) <= slot_sessions for g in groups)
    requests = log.requests
    assert len(requests) == 3 and all(r.pool == pool._core.id and r.outcome in ("stop", "length") for r in requests)
    assert all(r.admitted is not None and r.slot in (0, 1) for r in requests)
    check_all(log)


def test_cancellations_and_refusals_are_recorded_where_they_happen():
    engine = null_engine(step_seconds=0.01)
    pool = muser.SlotPool(engine, slots=1, max_waiting=1)
    holder = pool.acquire([270])
    with engine.record_schedule() as log:
        cancel = muser.CancelToken()
        waiter_error: list[BaseException] = []

        def wait_for_slot():
            try:
                pool.acquire([271], cancel=cancel)
            except muser.Cancelled as exc:
                waiter_error.append(exc)

        waiter = threading.Thread(target=wait_for_slot)
        waiter.start()
        deadline = time.monotonic() + 10
        while pool.stats()["admission"]["waiting"] != 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        with pytest.raises(muser.Overloaded):
            pool.acquire([272])
        cancel.cancel()
        waiter.join(timeout=10)
        holder.release()
        stopped = muser.CancelToken()
        stopped.cancel()
        with pytest.raises(muser.Cancelled):
            engine.session().prefill([270] * 10, cancel=stopped)
    assert waiter_error
    refused = sorted(a.refused for a in log.admissions if a.refused)
    assert refused == ["cancelled", "overloaded"]
    (earlier,) = [a for a in log.admissions if not a.refused]  # leased before the recording began
    assert earlier.requested is None and earlier.released is not None and earlier.slot == 0
    assert [c.where for c in log.cancellations] == ["admission", "prefill"]
    assert log.cancellations[0].pool == pool._core.id


def test_fixtures_give_a_recorded_null_engine_and_pool(muser_null_engine, muser_pool, muser_schedule_log):
    assert muser_pool.engine is muser_null_engine and muser_null_engine.backend == "null"
    muser.generate(muser_pool, [270, 271], max_tokens=4, temperature=0)
    assert muser_schedule_log.recording and len(muser_schedule_log.requests) == 1
    check_all(muser_schedule_log)
