"""Builds the Metal emulator test binary and runs ops on it.

The binary (tests/metal_emulator/op_runner.cpp) links the real op logic of
csrc/backend/metal/ops_encode.cpp, every kernel of metal/*.metal compiled as
C++ against the metal_stdlib shim, the coroutine emulator, and the
emulator's self-test kernels; all with AddressSanitizer and
UndefinedBehaviorSanitizer. It is built once per test session.

Needs clang >= 15 (for _Float16 on x86-64) with the sanitizer runtimes:
Debian's clang-16 and libclang-rt-16-dev, which the README's test command
installs (tools/test-system-packages.txt). Set MUSER_CLANG to use another.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
EMULATOR = REPO / "tests" / "metal_emulator"
KERNEL_FILES = sorted((REPO / "metal").glob("*.metal")) + [EMULATOR / "selftest_kernels.metal"]
SUPPORT_SOURCES = [
    EMULATOR / "emulator.cpp",
    EMULATOR / "emulator_encoder.cpp",
    EMULATOR / "op_runner.cpp",
    REPO / "csrc" / "backend" / "metal" / "ops_encode.cpp",
    REPO / "csrc" / "core" / "error.cpp",
    REPO / "csrc" / "tensor" / "dtype.cpp",
]
SANITIZERS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
# -ffp-contract=off: no a*b+c fusion, so kernels compute what the reference's
# separately rounded operations compute (rope, get_rows are then bitwise).
COMMON_FLAGS = ["-std=c++17", "-O1", "-g", "-fno-omit-frame-pointer", "-ffp-contract=off",
                "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
                f"-I{REPO / 'csrc'}", f"-I{EMULATOR}"]
KERNEL_FLAGS = ["-D__METAL_VERSION__=300", f"-I{EMULATOR / 'include'}", f"-I{REPO / 'metal'}"]
ORDERS = ["forward", "reverse", "random"]
RUN_ENV = {
    # The emulator switches stacks with ucontext (annotated for ASan); leak
    # checking is off because it needs ptrace, which sandboxes often forbid.
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
        "run `bash tools/install-test-system-packages.sh` (installs clang-16 and libclang-rt-16-dev) "
        "or set MUSER_CLANG")


def _compile(clang: str, source: Path, obj: Path, extra: list[str]) -> None:
    cmd = [clang, *COMMON_FLAGS, *extra, *SANITIZERS, "-c", str(source), "-o", str(obj)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"compiling {source} failed:\n{done.stderr}")


def build(out_dir: Path) -> Path:
    """Generates the kernel translation units, compiles everything, links op_runner."""
    clang = find_clang()
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = []
    for metal in KERNEL_FILES:
        generated = out_dir / f"kernels_{metal.stem}.cpp"
        gen = subprocess.run([sys.executable, str(EMULATOR / "gen_kernel_thunks.py"), str(metal), str(generated)],
                             capture_output=True, text=True)
        if gen.returncode != 0:
            raise RuntimeError(gen.stderr)
        jobs.append((generated, out_dir / f"kernels_{metal.stem}.o", KERNEL_FLAGS))
    for source in SUPPORT_SOURCES:
        jobs.append((source, out_dir / f"{source.stem}.o", []))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for future in [pool.submit(_compile, clang, s, o, f) for s, o, f in jobs]:
            future.result()
    exe = out_dir / "op_runner"
    link = subprocess.run([clang, *SANITIZERS, *[str(o) for _, o, _ in jobs], "-o", str(exe)],
                          capture_output=True, text=True)
    if link.returncode != 0:
        raise RuntimeError(f"linking op_runner failed:\n{link.stderr}")
    return exe


def _run_env() -> dict[str, str]:
    env = dict(os.environ, **RUN_ENV)
    # ASan names the .metal file and line of a bad access only when it finds
    # a symbolizer (Debian's llvm package provides one).
    for name in [f"llvm-symbolizer-{v}" for v in range(21, 13, -1)] + ["llvm-symbolizer"]:
        path = shutil.which(name)
        if path:
            env.setdefault("ASAN_SYMBOLIZER_PATH", path)
            break
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
        env = _run_env()
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
        env = _run_env()
        done = subprocess.run([str(self.exe), str(case), order, "7"], capture_output=True, text=True, env=env,
                              timeout=600)
        done.out = np.fromfile(case / "out.bin", dtype=np.float32) if (case / "out.bin").exists() else None
        return done
