"""An engine that is not asked for anything uses no CPU: its worker threads
poll only for a bounded time after a step (core/thread_pool.cpp), then
sleep, however many steps ran just before."""

from __future__ import annotations

import time

import muser


def _cpu_seconds_while_sleeping(seconds: float) -> float:
    started = time.process_time()
    time.sleep(seconds)
    return time.process_time() - started


def test_an_engine_left_idle_after_decoding_uses_no_cpu(tiny_model):
    engine = muser.Engine(tiny_model("llama", "Q4_0"), threads=4)
    session = engine.session(max_context=128)
    session.prefill([5, 6, 7, 8])
    for token in range(9, 60):
        session.decode(token)  # steps back to back
    # Process CPU time (not wall), so other load on the machine cannot make
    # this fail; a worker still polling would use ~0.4 s per thread here.
    assert _cpu_seconds_while_sleeping(0.4) < 0.05
    session.decode(60)
    assert session.logits.shape == (engine.n_vocab,)
