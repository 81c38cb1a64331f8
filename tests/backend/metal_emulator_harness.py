"""Builds the Metal emulator test programs and runs ops and engines on them.

The CMake project's MUSER_METAL_EMULATOR build (tests/metal_emulator/
emulator.cmake) makes, with clang, AddressSanitizer and UBSan:
- metal_op_runner: the real op logic of csrc/backend/metal/ops_encode.cpp
  over every kernel of metal/*.metal compiled as C++ against the
  metal_stdlib shim, on the coroutine emulator (plus its self-test kernels);
- metal_engine_runner: the whole engine with backend "metal", i.e. the real
  Objective-C++ host (csrc/backend/metal/*.mm) over the fake Metal framework
  over the emulator.
Built once per test session (a few minutes of CPU on two cores).

Needs clang >= 15 (_Float16 on x86-64) with the sanitizer runtimes, GCC's
Objective-C runtime and llvm-symbolizer: Debian's clang-16,
libclang-rt-16-dev, libobjc-12-dev and llvm, which the README's test command
installs (tools/test-system-packages.txt). MUSER_CLANG picks another clang.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SANITIZE = ("-fsanitize=address,undefined -fno-sanitize-recover=all "
            # No fake stacks: each coroutine switch would map and unmap one.
            "-fsanitize-address-use-after-return=never")
# -ffp-contract=off (set by the project for the engine, here for all): no
# a*b+c fusion, so kernels compute what the reference's separately rounded
# operations compute (rope, get_rows, add, scale are then bitwise).
FLAGS = f"-O1 -g -fno-omit-frame-pointer -ffp-contract=off {SANITIZE}"
ORDERS = ["forward", "reverse", "random"]
RUN_ENV = {
    # Leak checking needs ptrace, which sandboxes often forbid.
    "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:halt_on_error=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


class ToolchainMissing(RuntimeError):
    pass


def find_clang() -> str:
    candidates = [os.environ["MUSER_CLANG"]] if os.environ.get("MUSER_CLANG") else [
        f"clang++-{v}" for v in range(21, 14, -1)] + ["clang++"]
    for name in candidates:
        path = shutil.which(name)
        if not path:
            continue
        version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"clang version (\d+)", version)
        if m and int(m.group(1)) >= 15:
            return path
    raise ToolchainMissing(
        "the Metal emulator tests need clang >= 15 with sanitizer runtimes; "
        "run `bash tools/install-test-system-packages.sh` (installs clang-16, libclang-rt-16-dev, "
        "libobjc-12-dev, llvm) or set MUSER_CLANG")


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({' '.join(cmd)}):\n{done.stdout[-8000:]}\n{done.stderr[-8000:]}")


def build(out_dir: Path) -> dict[str, Path]:
    """Configures and builds the emulator programs; returns their paths by name."""
    clang = find_clang()
    generator = ["-G", "Ninja"] if shutil.which("ninja") else ["-G", "Unix Makefiles"]
    _run(["cmake", "-S", str(REPO), "-B", str(out_dir), *generator, "-DMUSER_METAL_EMULATOR=ON",
          "-DMUSER_CUDA=OFF",  # a CUDA toolkit on the machine is not this build's business
          f"-DCMAKE_CXX_COMPILER={clang}", f"-DCMAKE_OBJCXX_COMPILER={clang}", "-DCMAKE_BUILD_TYPE=Debug",
          f"-DCMAKE_CXX_FLAGS={FLAGS}", f"-DCMAKE_OBJCXX_FLAGS={FLAGS}",
          f"-DCMAKE_EXE_LINKER_FLAGS={SANITIZE}", f"-DPython_EXECUTABLE={sys.executable}"],
         "configuring the Metal emulator build")
    _run(["cmake", "--build", str(out_dir), "-j", str(os.cpu_count() or 2),
          "--target", "metal_op_runner", "metal_engine_runner"], "building the Metal emulator programs")
    return {name: out_dir / name for name in ("metal_op_runner", "metal_engine_runner")}


def run_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, **RUN_ENV)
    # ASan names the .metal file and line of a bad access only when it finds
    # a symbolizer (Debian's llvm package provides one).
    for name in [f"llvm-symbolizer-{v}" for v in range(21, 13, -1)] + ["llvm-symbolizer"]:
        path = shutil.which(name)
        if path:
            env.setdefault("ASAN_SYMBOLIZER_PATH", path)
            break
    env.update(extra or {})
    return env


class OpFailed(Exception):
    """The op logic or the emulator refused or detected an error (exit 3)."""


class OpRunner:
    def __init__(self, exe: Path, scratch: Path):
        self.exe = exe
        self.scratch = scratch
        self.count = 0

    def run(self, op: str, inputs: dict[str, np.ndarray], params: dict, outputs: list[str],
            order: str = "forward", seed: int = 1234, dtypes: dict[str, type] | None = None
            ) -> dict[str, np.ndarray]:
        """Runs `op`; returns each output as a flat array (float32 unless `dtypes` says)."""
        self.count += 1
        case = self.scratch / f"case{self.count}"
        case.mkdir(parents=True)
        for name, array in inputs.items():
            np.ascontiguousarray(array).tofile(case / f"{name}.bin")
        lines = [f"op {op}"] + [f"{k} {v}" for k, v in params.items()]
        (case / "op.txt").write_text("\n".join(lines) + "\n")
        env = run_env()
        done = subprocess.run([str(self.exe), str(case), order, str(seed)], capture_output=True, text=True,
                              env=env, timeout=600)
        if done.returncode == 3:
            raise OpFailed(done.stderr.strip())
        if done.returncode != 0:
            raise RuntimeError(f"op_runner {op} ({order}) exited {done.returncode}:\n{done.stderr[-6000:]}")
        result = {}
        for name in outputs:
            dtype = (dtypes or {}).get(name, np.float32)
            result[name] = np.fromfile(case / f"{name}.bin", dtype=dtype)
        shutil.rmtree(case)
        return result

    def run_raw(self, kernel: str, threads: int, n_out: int, threadgroup_bytes: int = 0, groups: int = 1,
                order: str = "forward") -> subprocess.CompletedProcess:
        """Runs a bare self-test kernel; returns the finished process (out.bin in its case folder)."""
        self.count += 1
        case = self.scratch / f"case{self.count}"
        case.mkdir(parents=True)
        (case / "op.txt").write_text(
            f"op raw\nkernel {kernel}\nthreads {threads}\nn_out {n_out}\n"
            f"threadgroup_bytes {threadgroup_bytes}\ngroups {groups}\n")
        env = run_env()
        done = subprocess.run([str(self.exe), str(case), order, "7"], capture_output=True, text=True, env=env,
                              timeout=600)
        done.out = np.fromfile(case / "out.bin", dtype=np.float32) if (case / "out.bin").exists() else None
        return done
