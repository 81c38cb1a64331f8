"""The concurrent C++ core under ThreadSanitizer and AddressSanitizer+UBSan.

tests/sanitizers/serve_stress.cpp drives the scheduler, slot admission,
decode batcher, thread pool and cancellation from many threads with
timeouts, cancellations and injected failures; it is built here with each
sanitizer into its own build directory (build/sanitizers-<name>, apart from
the extension's build) and must finish with every check held and no
sanitizer report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).resolve().parent


def _tool(name: str) -> str:
    beside_python = Path(sys.executable).with_name(name)  # the test extra installs cmake and ninja
    found = str(beside_python) if beside_python.exists() else shutil.which(name)
    assert found, f"{name} is needed to build the sanitizer driver (pip install '.[test]' provides it)"
    return found


@pytest.mark.slow
@pytest.mark.parametrize("sanitizer, report", [
    ("thread", "ThreadSanitizer"),
    ("address,undefined", "Sanitizer"),
])
def test_the_concurrent_core_is_clean_under_the_sanitizer(sanitizer, report):
    build = REPO / "build" / f"sanitizers-{sanitizer.split(',')[0]}"
    configure = [_tool("cmake"), "-S", str(SOURCE), "-B", str(build), f"-DMUSER_SANITIZE={sanitizer}",
                 "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}"]
    subprocess.run(configure, check=True, capture_output=True, text=True)
    built = subprocess.run([_tool("cmake"), "--build", str(build), "-j2"], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    env = dict(os.environ,
               TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1",
               ASAN_OPTIONS="detect_leaks=1 abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1")
    run = subprocess.run([str(build / "serve_stress")], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-8000:]
    assert report not in run.stderr, run.stderr[-8000:]
    assert "all checks held" in run.stdout
