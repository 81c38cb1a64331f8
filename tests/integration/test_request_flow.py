"""Request flow (issue 14): astream without executor threads, per-request
deadlines with DeadlineExceeded, cache-aware admission through the pool, and
the telemetry in pool.stats()."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import muser
from tests.fixtures.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("flow") / "llama.gguf", weight_type="Q8_0",
                            context_length=4096)
    return muser.Engine(path, threads=2)


@pytest.fixture
def slow_engine(tmp_path):
    """Null backend: every forward takes 0.05 s."""
    path = write_tiny_model(tmp_path / "slow.gguf", context_length=8192)
    return muser.Engine(path, threads=1, backend="null", null_step_seconds=0.05)


# -- item 4: astream ---------------------------------------------------------------

def test_sixteen_async_requests_on_four_slots_all_complete_without_executor_threads(tiny):
    pool = muser.SlotPool(tiny, slots=4, max_context=4096)

    async def main():
        async def one(i):
            return [c async for c in muser.astream(pool, [i + 1, 2, 3], max_tokens=150, temperature=0,
                                                   consumer_timeout=0.5)]

        results = await asyncio.gather(*(one(i) for i in range(16)))
        executor_threads = [t.name for t in threading.enumerate() if t.name.startswith("asyncio")]
        return results, executor_threads

    results, executor_threads = asyncio.run(main())
    assert all(chunks[-1].finish_reason in ("length", "stop") for chunks in results)
    assert executor_threads == []
    assert pool.stats()["requests"]["finished"] == 16


def test_leaving_an_async_for_early_cancels_the_request(tiny):
    pool = muser.SlotPool(tiny, slots=1, max_context=4096)

    async def main():
        async for _ in muser.astream(pool, [1, 2, 3], max_tokens=4000, temperature=0):
            break

    asyncio.run(main())
    with pool.acquire(timeout=5):
        pass


# -- deadlines ---------------------------------------------------------------------

def test_a_request_past_its_deadline_raises_deadline_exceeded_and_frees_its_slot(slow_engine):
    pool = muser.SlotPool(slow_engine, slots=2, max_context=4096)
    started = time.monotonic()
    with pytest.raises(muser.DeadlineExceeded) as caught:
        muser.generate(pool, [1, 2, 3], max_tokens=1000, temperature=0, timeout=0.3)
    assert isinstance(caught.value, TimeoutError)
    assert time.monotonic() - started < 2.0  # 1000 steps would take 50 s
    assert pool.stats()["admission"]["in_use"] == 0
    assert pool.stats()["requests"]["deadline_exceeded"] == 1


def test_a_deadline_is_checked_before_prefill_chunks(slow_engine):
    pool = muser.SlotPool(slow_engine, slots=1, max_context=8192)
    started = time.monotonic()
    with pytest.raises(muser.DeadlineExceeded):
        list(muser.stream(pool, [1] * 8000, max_tokens=5, timeout=0.2))  # 16 chunks: 0.8 s
    assert time.monotonic() - started < 0.6
    with pool.acquire(timeout=5) as slot:
        assert slot.n_past == 0


def test_a_deadline_covers_waiting_for_a_slot(slow_engine):
    pool = muser.SlotPool(slow_engine, slots=1, max_context=4096)
    with pool.acquire():
        with pytest.raises(muser.DeadlineExceeded):
            muser.generate(pool, [1, 2], max_tokens=5, timeout=0.2)
        assert pool.stats()["admission"]["waiting"] == 0


# -- cache-aware admission ---------------------------------------------------------

def test_the_waiter_with_the_longest_cached_prefix_is_admitted_first(tiny):
    pool = muser.SlotPool(tiny, slots=1, max_context=256)
    cached = [5, 6, 7, 8, 9, 10]
    order: list[str] = []
    with pool.acquire(cached) as slot:
        slot.prefill(cached)

        def waiter(name, prompt):
            with pool.acquire(prompt, timeout=30) as s:
                order.append(name)
                s.prefill(prompt[s.reused_tokens:])

        cold = threading.Thread(target=waiter, args=("cold", [1, 2, 3]))
        cold.start()
        while pool.stats()["admission"]["waiting"] < 1:
            time.sleep(0.005)
        warm = threading.Thread(target=waiter, args=("warm", cached + [11]))
        warm.start()
        while pool.stats()["admission"]["waiting"] < 2:
            time.sleep(0.005)
    cold.join(timeout=30)
    warm.join(timeout=30)
    assert order == ["warm", "cold"]
    assert pool.stats()["prefix_hits"] >= 1


# -- telemetry ---------------------------------------------------------------------

def test_stats_count_outcomes_and_split_the_time(tiny):
    pool = muser.SlotPool(tiny, slots=2, max_context=4096)
    muser.generate(pool, [1, 2, 3], max_tokens=8, temperature=0)
    muser.generate(pool, [1, 2, 3], max_tokens=8, temperature=0)  # reuses the cached prompt
    token = muser.CancelToken()
    for chunk in muser.stream(pool, [4, 5], max_tokens=500, cancel=token, temperature=0):
        token.cancel()
    def failing_processor(token_ids, logits):
        raise RuntimeError("a logits processor failed")

    with pytest.raises(RuntimeError):
        muser.generate(pool, [1, 2], max_tokens=3, logits_processors=[failing_processor])
    stats = pool.stats()
    assert stats["requests"] == {"finished": 2, "failed": 1, "cancelled": 1, "deadline_exceeded": 0}
    assert stats["prefix_hits"] >= 1 and stats["prefix_misses"] >= 1
    assert stats["kv_bytes"] > 0
    assert set(stats["time_ns"]) == {"queue_wait", "batch_wait", "permit_wait", "forward", "sampling"}
    assert stats["time_ns"]["forward"] > 0 and stats["time_ns"]["sampling"] > 0
