"""A CPU-only build (no CUDA toolkit, or MUSER_CUDA=OFF) compiles the CUDA testing bindings against
csrc/backend/no_cuda.cpp, which answers "compiled without CUDA" for every function of
csrc/backend/cuda_testing.h. A function declared there without a stub links into an extension that fails to
import (an undefined symbol), which a CUDA build here never shows: on 2026-12-02 the Xeon's CPU-only build
failed that way on attention_quantized. This checks the two files agree, by name."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def declared_functions(header: str) -> set[str]:
    code = "\n".join(line.split("//")[0] for line in header.splitlines())
    # Declarations end in ');' (after their parameter lists); struct fields and types do not.
    names = set()
    for match in re.finditer(r"\b([A-Za-z_]\w*)\s*\(([^;{}]*)\)\s*(?:const\s*)?(?:noexcept\s*)?;", code):
        name = match.group(1)
        if name not in {"if", "for", "while", "return", "sizeof", "decltype", "static_assert", "alignas"}:
            names.add(name)
    return names


def test_every_cuda_testing_function_has_a_cpu_build_stub():
    header = (ROOT / "csrc/backend/cuda_testing.h").read_text()
    stubs = (ROOT / "csrc/backend/no_cuda.cpp").read_text()
    declared = declared_functions(header)
    assert {"attention", "attention_quantized", "gemm_mma"} <= declared, declared
    missing = sorted(name for name in declared if not re.search(rf"\b{name}\s*\(", stubs))
    assert missing == [], f"declared in cuda_testing.h without a stub in no_cuda.cpp: {missing}"
