"""Lifecycle (issue 14 items 1-3): interpreter exit, a closed pipe and Ctrl-C
never abort the process; Ctrl-C reaches long core calls promptly and leaves
the session as it was; nothing leaks threads or slots when a consumer goes
away; close() and context managers cancel and join in-flight work."""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import muser
from tests.fixtures.tiny_models import write_tiny_model

REPO = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = Path(muser.__file__).resolve().parents[1]  # src/ in a checkout, site-packages when installed


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), str(REPO)]), PYTHONUNBUFFERED="1")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("lifecycle") / "llama.gguf", weight_type="Q8_0",
                            context_length=4096)


@pytest.fixture(scope="module")
def tiny(model_path):
    return muser.Engine(model_path, threads=2)


def _request_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("muser-request")]


def _wait_until(predicate, timeout: float = 10.0) -> bool:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


# -- item 1: no aborts at exit, on a closed pipe, on Ctrl-C ----------------------

_EXIT_SCRIPTS = {
    "an open stream": """
        it = muser.stream(engine, [1, 2, 3], max_tokens=4000, temperature=0)
        next(it)
    """,
    "a thread still generating": """
        def work():
            try:
                muser.generate(engine, [1, 2, 3], max_tokens=4000)
            except muser.Cancelled:  # what the exit hook makes of a request still running
                pass
        threading.Thread(target=work, daemon=True).start()
        time.sleep(0.2)
    """,
    "four open streams on one pool": """
        pool = muser.SlotPool(engine, slots=4, max_context=4096)
        streams = [muser.stream(pool, [i + 1, 2, 3], max_tokens=4000) for i in range(4)]
        for s in streams:
            next(s)
    """,
}


@pytest.mark.parametrize("situation", list(_EXIT_SCRIPTS))
def test_the_interpreter_exits_cleanly_with_requests_in_flight(model_path, situation):
    body = "\n".join(line[8:] for line in _EXIT_SCRIPTS[situation].strip("\n").splitlines())
    script = f"import sys, threading, time\nimport muser\nengine = muser.Engine(sys.argv[1], threads=2)\n{body}\n"
    for _ in range(3):  # the abort was a race; it showed in every run, but be sure
        done = subprocess.run([sys.executable, "-c", script, str(model_path)], env=_env(), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""  # no "terminate called", no "Exception ignored"


_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def _cli(model_path: Path, command: str = "generate") -> subprocess.Popen:
    args = ["Once upon a time"] if command == "generate" else ["--template", _TEMPLATE, "--message", "Hi"]
    return subprocess.Popen([sys.executable, "-m", "muser", command, "--model", str(model_path),
                             "--max-tokens", "4000", "--temperature", "0", *args],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_muser_generate_into_a_pipe_closed_early_exits_without_abort(model_path):
    for _ in range(3):
        proc = _cli(model_path)
        proc.stdout.read(16)  # generation is under way
        proc.stdout.close()   # `| head -c 16`
        stderr = proc.stderr.read().decode()
        proc.wait(timeout=60)
        assert proc.returncode in (0, 141), stderr
        assert "terminate called" not in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("command", ["generate", "chat"])
def test_ctrl_c_in_the_cli_exits_130_without_abort(model_path, command):
    for _ in range(3):
        proc = _cli(model_path, command)
        proc.stdout.read(16)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr.decode()
        assert b"terminate called" not in stderr and b"Traceback" not in stderr


# -- item 2: Ctrl-C reaches long core calls --------------------------------------

@pytest.fixture
def slow_engine(tmp_path):
    """Null backend: every forward (a 512-row chunk or a decode) takes 0.1 s."""
    path = write_tiny_model(tmp_path / "slow.gguf", context_length=8192)
    return muser.Engine(path, threads=1, backend="null", null_step_seconds=0.1)


def _interrupt_main_after(seconds: float) -> list[float]:
    fired: list[float] = []

    def fire():
        fired.append(time.monotonic())
        _thread.interrupt_main()  # what Ctrl-C does: SIGINT's handler trips on the main thread

    threading.Timer(seconds, fire).start()
    return fired


def test_ctrl_c_stops_a_long_prefill_within_half_a_second_and_leaves_the_session_as_it_was(slow_engine):
    session = slow_engine.session(max_context=8192)
    session.prefill([1, 2, 3])
    tokens, logits = session.tokens, session.logits
    fired = _interrupt_main_after(0.25)
    with pytest.raises(KeyboardInterrupt):
        session.prefill([5] * 8000)  # 16 chunks: 1.6 s uninterrupted
    assert time.monotonic() - fired[0] < 0.5
    assert session.tokens == tokens and session.n_past == 3
    np.testing.assert_array_equal(session.logits, logits)
    session.decode(4)  # and it still works
    assert session.n_past == 4


# Several threads whose first blocking call into the core comes at once, while
# asking Python for the main thread lets another thread take the GIL (here
# forced by a sleep inside threading.main_thread).
FIRST_CALLS_AT_ONCE = """
import sys, threading, time
import muser
real_main_thread = threading.main_thread
def slow_main_thread():
    time.sleep(0.2)
    return real_main_thread()
threading.main_thread = slow_main_thread
engine = muser.Engine(sys.argv[1], threads=1)
sessions = [engine.session(max_context=64) for _ in range(4)]
barrier = threading.Barrier(len(sessions))
def first_call(session):
    barrier.wait()
    session.prefill([1, 2, 3])
threads = [threading.Thread(target=first_call, args=(s,)) for s in sessions]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("all prefilled")
"""


def test_threads_making_their_first_blocking_call_at_once_do_not_deadlock(model_path):
    """Each blocking call first asks whether it runs on the main thread
    (only there does Ctrl-C reach it). The answer used to be a static whose
    first computation called into Python: a thread that took the GIL in the
    meantime waited on that static holding the GIL, and the process hung
    (examples/asyncio_app.py in CI, about one run in five)."""
    done = subprocess.run([sys.executable, "-c", FIRST_CALLS_AT_ONCE, str(model_path)], env=_env(),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["all", "prefilled"]


def test_ctrl_c_stops_a_wait_for_a_slot(slow_engine):
    pool = muser.SlotPool(slow_engine, slots=1, max_context=64)
    with pool.acquire():
        fired = _interrupt_main_after(0.2)
        with pytest.raises(KeyboardInterrupt):
            pool.acquire(timeout=5)
        assert time.monotonic() - fired[0] < 0.5
        assert pool.stats()["admission"]["waiting"] == 0


# -- item 3: no leaked threads or slots ------------------------------------------

def test_ctrl_c_in_generate_with_n_4_cancels_and_joins_every_completion(slow_engine):
    pool = muser.SlotPool(slow_engine, slots=4, max_context=4096)
    fired = _interrupt_main_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        muser.generate(pool, [1, 2, 3], n=4, max_tokens=1000, temperature=0, stop_token_ids=())
    assert fired
    # generate waited for its threads before re-raising: nothing is left behind.
    assert _request_threads() == []
    assert pool.stats()["admission"]["in_use"] == 0


def test_a_stream_closed_before_its_first_chunk_frees_its_slot_and_thread(tiny):
    pool = muser.SlotPool(tiny, slots=1, max_context=4096)
    iterator = muser.stream(pool, [1, 2, 3], max_tokens=4000, temperature=0)
    iterator.close()
    with pool.acquire(timeout=2):  # today it held the slot until the 5 s consumer timeout
        pass
    assert _wait_until(lambda: _request_threads() == [])


def test_a_dropped_stream_frees_its_slot(tiny):
    pool = muser.SlotPool(tiny, slots=1, max_context=4096)
    iterator = muser.stream(pool, [1, 2, 3], max_tokens=4000, temperature=0)
    next(iterator)
    del iterator
    with pool.acquire(timeout=2):
        pass


def test_generate_with_n_2_reads_its_completions_concurrently(tiny):
    # Request 1 used to wait in a full channel while request 0 was read; with
    # a short grace period and a waiter it was cancelled.
    pool = muser.SlotPool(tiny, slots=2, max_context=4096)
    texts = muser.generate(pool, [1, 2, 3], n=2, max_tokens=600, temperature=1.0, seed=5, consumer_timeout=0.05)
    assert len(texts) == 2 and all(texts)
    assert pool.stats()["requests"]["finished"] == 2


def test_closing_a_pool_cancels_and_joins_its_generations(tiny):
    with muser.SlotPool(tiny, slots=2, max_context=4096) as pool:
        streams = [muser.stream(pool, [i + 1, 2], max_tokens=4000, temperature=0) for i in range(2)]
        for s in streams:
            next(s)
    assert _request_threads() == []
    assert pool.stats()["admission"]["in_use"] == 0
    with pytest.raises(muser.Unhealthy, match="closed"):
        pool.acquire()


def test_closing_an_engine_closes_its_pools_and_the_default_pool_is_remade(model_path):
    with muser.Engine(model_path, threads=2) as engine:
        stream = muser.stream(engine, [1, 2], max_tokens=4000, temperature=0)
        next(stream)
    assert _request_threads() == []
    assert muser.generate(engine, [1, 2], max_tokens=3, temperature=0)  # a fresh default pool


@pytest.mark.slow
@pytest.mark.real_model
def test_ctrl_c_stops_a_real_prefill_between_layers_and_the_session_resumes_exactly(smollm2_path):
    engine = muser.Engine(smollm2_path, threads=2)
    prompt = [int(t) for t in np.random.default_rng(0).integers(100, 20000, 1024)]
    reference = engine.session(max_context=2048)
    started = time.monotonic()
    reference.prefill(prompt[:512])  # one full 512-row chunk
    chunk_seconds = time.monotonic() - started
    reference.prefill(prompt[512:])

    session = engine.session(max_context=2048)
    session.prefill(prompt[:8])
    fired = _interrupt_main_after(chunk_seconds * 0.25)
    with pytest.raises(KeyboardInterrupt):
        session.prefill(prompt[8:])
    # Noticed inside the first chunk (between layers), not at its end.
    assert time.monotonic() - fired[0] < chunk_seconds * 0.5
    assert session.n_past == 8
    session.prefill(prompt[8:])  # the partly written KV is dropped and rebuilt: same result
    np.testing.assert_array_equal(session.logits, reference.logits)
