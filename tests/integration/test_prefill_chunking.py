"""Adaptive prefill chunking with real threads on the null backend (each
forward takes a fixed time, so the schedule is under the test's control)."""

from __future__ import annotations

import threading
import time

import pytest

import muser
from muser import _core
from tests.fixtures.tiny_models import write_tiny_model


@pytest.fixture
def slow_engine(tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", context_length=4096)
    return muser.Engine(path, threads=1, backend="null", null_step_seconds=0.01)


def test_chunk_constants_are_readable_from_python():
    assert (_core.PREFILL_CHUNK_ROWS, _core.PREFILL_CHUNK_ROWS_CONTENDED, _core.MAX_DECODE_GROUP_ROWS) == (512, 64, 4)


def test_an_uncontended_prefill_runs_in_512_row_chunks(slow_engine):
    slow_engine.session(max_context=2048).prefill([1] * 1500)
    stats = slow_engine.scheduler_stats()
    assert stats["prefill_grants"] == 3 and stats["prefill_rows"] == 1500
    assert stats["prefill_chunks_contended"] == 0


def test_a_running_decoder_cuts_prefill_chunks_to_64_rows_and_waits_at_most_one_chunk(slow_engine):
    decoder = slow_engine.session(max_context=2048)
    decoder.prefill([1, 2])
    waits: list[float] = []
    stop = threading.Event()

    def decode_loop():
        while not stop.is_set():
            started = time.perf_counter()
            decoder.decode(3)
            waits.append(time.perf_counter() - started)

    thread = threading.Thread(target=decode_loop)
    thread.start()
    while len(waits) < 2:
        time.sleep(0.001)
    before = slow_engine.scheduler_stats()
    slow_engine.session(max_context=2048).prefill([1] * 640)
    stop.set()
    thread.join(timeout=10)
    after = slow_engine.scheduler_stats()
    chunks = after["prefill_grants"] - before["prefill_grants"]
    assert after["prefill_rows"] - before["prefill_rows"] == 640
    assert chunks == 10  # 640 rows in 64-row chunks
    assert after["prefill_chunks_contended"] - before["prefill_chunks_contended"] == 10
    # Each decode waited for at most the chunk in progress plus its own step.
    assert max(waits) < 0.01 * 2 + 0.05
