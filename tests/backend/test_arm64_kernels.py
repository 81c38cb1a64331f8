"""The arm64 NEON kernel tables (csrc/backend/cpu/*_neon.cpp), checked against
the scalar reference without arm64 hardware: a small C++ driver
(tests/backend/arm64/kernel_driver.cpp) is cross-compiled with
g++-aarch64-linux-gnu together with the kernels, the reference kernels and the
run-time dispatch, and run under qemu-user, once per instruction-set variant.
On an arm64 host the driver is compiled and run natively instead.

The driver checks, for every weight type, 1/31/32/33 output rows and
1/2/31/32/33 blocks per row: activation quantizers write the reference's
bytes; quantized types equal ref::vec_dot bit for bit; float types stay within
1e-5 of sum |w x|; and every row is bitwise the same alone, in a batch of up to
five rows, or with the output rows split over two calls.

The cross compiler and emulator come from tools/test-system-packages.txt
(installed by the README's test command).
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
NATIVE = platform.machine() in ("aarch64", "arm64")
# (source, extra flags): the arm64 tables with the flags CMakeLists.txt gives them.
KERNEL_SOURCES = [
    ("backend/cpu/kernels_neon.cpp", []),
    ("backend/cpu/kernels_dotprod_neon.cpp", ["-march=armv8.2-a+dotprod"]),
    ("backend/cpu/kernels_i8mm_neon.cpp", ["-march=armv8.2-a+dotprod+i8mm"]),
]
SUPPORT_SOURCES = ["backend/cpu/isa.cpp", "backend/cpu/kernels_scalar.cpp", "tensor/reference_kernels.cpp",
                   "tensor/dtype.cpp", "core/error.cpp"]
FLAGS = ["-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
         f"-I{CSRC}"]
# qemu CPU models and the best instruction set isa.cpp must find on each.
EMULATED_CPUS = {"cortex-a53": "neon", "cortex-a76": "neon_dotprod", "max": "neon_i8mm"}

pytestmark = pytest.mark.slow


def _compiler() -> str:
    name = "g++" if NATIVE else "aarch64-linux-gnu-g++"
    if shutil.which(name) is None or (not NATIVE and shutil.which("qemu-aarch64") is None):
        pytest.fail("the arm64 kernel tests need g++-aarch64-linux-gnu and qemu-user: "
                    "run `bash tools/install-test-system-packages.sh` (see tools/test-system-packages.txt)")
    return name


def _run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    cxx = _compiler()
    out = tmp_path_factory.mktemp("arm64")
    objects = [out / f"kernels_{i}.o" for i in range(len(KERNEL_SOURCES))]
    # The three tables are the slow part of the build: compile them side by side.
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(
            lambda job: _run([cxx, *FLAGS, *job[0][1], "-c", str(CSRC / job[0][0]), "-o", str(job[1])]),
            zip(KERNEL_SOURCES, objects)))
    for done in results:
        assert done.returncode == 0, done.stderr
    binary = out / "kernel_driver"
    link = _run([cxx, *FLAGS, *([] if NATIVE else ["-static"]),
                 str(ROOT / "tests/backend/arm64/kernel_driver.cpp"),
                 *(str(CSRC / s) for s in SUPPORT_SOURCES), *map(str, objects), "-o", str(binary)])
    assert link.returncode == 0, link.stderr
    return binary


def _run_driver(binary: Path, arg: str, cpu: str = "max") -> subprocess.CompletedProcess:
    command = [str(binary), arg] if NATIVE else ["qemu-aarch64", "-cpu", cpu, str(binary), arg]
    return _run(command)


@pytest.mark.skipif(NATIVE, reason="choosing the emulated CPU needs qemu (an arm64 host has one CPU)")
@pytest.mark.parametrize("cpu", list(EMULATED_CPUS))
def test_dispatch_picks_the_best_table_the_emulated_cpu_runs_and_never_a_later_one(driver, cpu):
    done = _run_driver(driver, "detect", cpu)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.split()
    best = EMULATED_CPUS[cpu]
    assert f"best {best}" in done.stdout.replace("\n", " ")
    order = ["neon", "neon_dotprod", "neon_i8mm"]
    assert [isa for isa in order if isa in lines] == order[:order.index(best) + 1]


def test_asking_for_a_table_the_cpu_lacks_is_a_clear_error_not_a_crash(driver):
    if NATIVE:
        pytest.skip("every variant may be present on an arm64 host")
    done = _run_driver(driver, "neon_i8mm", "cortex-a53")
    assert done.returncode == 3
    assert "instruction set 'neon_i8mm' is not supported by this CPU" in done.stdout


@pytest.mark.parametrize("isa", ["neon", "neon_dotprod", "neon_i8mm"])
def test_neon_tables_match_the_scalar_reference_and_are_batch_invariant(driver, isa):
    if NATIVE:
        listed = _run_driver(driver, "detect").stdout.split()
        if isa not in listed:
            pytest.skip(f"this arm64 CPU has no {isa}")
    done = _run_driver(driver, isa)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{isa}: " in done.stdout and " 0 failures" in done.stdout
