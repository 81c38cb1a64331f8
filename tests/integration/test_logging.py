"""Everything muser reports goes through logging.getLogger("muser"): load,
backend choice, pool events (fetch is covered in tests/unit/test_package_index.py)."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

import muser
from tests.fixtures.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("log") / "llama.gguf", weight_type="Q8_0")


def test_loading_logs_the_model_and_the_backend_choice(tiny_path, caplog):
    with caplog.at_level(logging.INFO, logger="muser"):
        engine = muser.Engine(tiny_path, threads=1)
    messages = [r.getMessage() for r in caplog.records if r.name == "muser"]
    assert any(m.startswith("loaded ") and str(tiny_path) in m for m in messages)
    assert any(m.startswith(f"backend {engine.backend} (asked for 'auto'") for m in messages)


def test_pool_events_are_logged(tiny_path, caplog):
    engine = muser.Engine(tiny_path, threads=1)
    with caplog.at_level(logging.DEBUG, logger="muser"):
        pool = muser.SlotPool(engine, slots=1, max_waiting=0, max_context=32)
        with pool.acquire([1, 2, 3]) as slot:
            slot.prefill([1, 2, 3])
            with pytest.raises(muser.Overloaded):
                pool.acquire([1], timeout=0)
        with pytest.raises(RuntimeError):
            with pool.acquire([1, 2, 3]) as slot:
                assert slot.reused_tokens == 3
                raise RuntimeError("user code failed")
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "muser"]
    assert (logging.INFO, "slot pool: 1 slots, max_context 32, max_waiting 0, batch window 250 us") in messages
    assert (logging.DEBUG, "acquired slot 0 (0 of 3 prompt tokens already cached)") in messages
    assert (logging.DEBUG, "acquired slot 0 (3 of 3 prompt tokens already cached)") in messages
    assert any(level == logging.WARNING and "overloaded" in m for level, m in messages)
    assert messages.count((logging.DEBUG, "released slot 0")) == 2


def test_a_context_shift_is_logged(tiny_path, caplog):
    engine = muser.Engine(tiny_path, threads=1)
    pool = muser.SlotPool(engine, slots=1, max_context=16)
    with caplog.at_level(logging.INFO, logger="muser"):
        muser.generate(pool, [1, 2, 3], max_tokens=30, temperature=0, context_shift=True, n_keep=2)
    assert any(r.getMessage().startswith("slot 0: context shift (kept 2 tokens at the start)")
               for r in caplog.records)


def test_the_library_prints_nothing_on_its_own(tiny_path):
    code = ("import muser; e = muser.Engine(%r, threads=1); muser.generate(e, [1, 2], max_tokens=3); "
            "muser.SlotPool(e, slots=1)" % str(tiny_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "" and out.stderr == ""


def test_the_command_line_shows_info_logs_on_stderr_and_quiet_hides_them(tiny_path):
    run = [sys.executable, "-m", "muser"]
    loud = subprocess.run(run + ["info", str(tiny_path)], capture_output=True, text=True, check=True)
    assert "muser: loaded " in loud.stderr
    quiet = subprocess.run(run + ["-q", "info", str(tiny_path)], capture_output=True, text=True, check=True)
    assert "loaded" not in quiet.stderr and "architecture" in quiet.stdout
