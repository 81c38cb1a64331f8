"""benchmarks/bench_gemv_streams.py (the device check of the decode stream
count): one small run prints a row per kernel case and per thread count,
with a figure for every stream count, and leaves the CPU's default alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from muser._core import _testing as t

ROOT = Path(__file__).resolve().parents[2]


def test_a_small_run_has_a_figure_per_stream_count_and_restores_the_default(tiny_model):
    path = tiny_model("llama", "Q4_0")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_gemv_streams.py"), "--types", "Q4_0", "--shapes", "64x48",
         "--rows", "1,4", "--rounds", "1", "--min-seconds", "0.001", "--streams", "1,4", "--model", str(path),
         "--threads", "1,2", "--steps", "2"],
        capture_output=True, text=True, check=True, timeout=300,
        # the muser this test imports (installed or a source tree), plus the benchmarks' helpers
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), *sys.path])},
    )
    lines = done.stdout.splitlines()
    assert lines[0] == f"default streams on this CPU: {t.gemv_streams()}"
    kernel_rows = [line for line in lines if line.startswith("Q4_0")]
    assert [line.split()[2] for line in kernel_rows] == ["1", "4"]
    assert all(len(re.findall(r"\d+\.\d{3}", line)) == 2 for line in kernel_rows)
    model_rows = [line for line in lines if line.startswith("threads")]
    assert [line.split()[1] for line in model_rows] == ["1", "2"]
    assert all("s=1:" in line and "s=4:" in line for line in model_rows)
