"""Dot products: the scalar reference equals the exact dot product of the
dequantized operands, and every SIMD kernel table equals the scalar one up to
float summation order (tolerances in kernel_cases.TOLERANCES)."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT

from muser._core import _testing as t

import activation_blocks as ab
from kernel_cases import ALL_TYPES, TOLERANCES, block_geometry, id_of, random_row

SIMD_ISAS = [isa for isa in t.cpu_isas() if isa != "scalar"]


def block_counts(qtype):
    elems, _ = block_geometry(qtype)
    if elems == 1:
        return [1, 7, 31, 32, 33, 64, 100, 576]
    return [1, 2, 7] + ([18, 31, 32, 33] if elems == 32 else [6])


def exact_dot(qtype, raw_w, x):
    """float64 dot of the dequantized weight and dequantized activation."""
    n = x.size
    w = t.dequantize(id_of(qtype), raw_w, n).astype(np.float64)
    fmt = t.activation_format(id_of(qtype))
    a = x.astype(np.float64) if fmt == "F32" else ab.dequantize(fmt, t.quantize_activation(fmt, x))
    return float(w @ a), float(np.abs(w) @ np.abs(a))


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
def test_scalar_vec_dot_is_the_dot_of_the_dequantized_operands(qtype):
    rng = np.random.default_rng(11 + id_of(qtype))
    elems, _ = block_geometry(qtype)
    # Q4_1/Q5_1 use the activation's fp16 sum s = fp16(d * sum(q)) for the
    # minimum's term, a relative 2^-11 rounding of that term.
    rtol = 2e-3 if qtype in (GT.Q4_1, GT.Q5_1) else 1e-5
    for blocks in block_counts(qtype):
        n = blocks * elems
        raw_w = random_row(qtype, n, rng)
        x = rng.standard_normal(n).astype(np.float32)
        expected, scale = exact_dot(qtype, raw_w, x)
        got = t.vec_dot(id_of(qtype), raw_w, x, "scalar")
        assert abs(got - expected) <= rtol * scale + 1e-30, (n, got, expected)


@pytest.mark.parametrize("isa", SIMD_ISAS)
@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
def test_simd_vec_dot_equals_scalar_vec_dot(qtype, isa):
    rng = np.random.default_rng(23 + id_of(qtype))
    elems, _ = block_geometry(qtype)
    rtol = TOLERANCES[qtype][1]
    for blocks in block_counts(qtype):
        n = blocks * elems
        for _ in range(3):
            raw_w = random_row(qtype, n, rng)
            x = rng.standard_normal(n).astype(np.float32)
            _, scale = exact_dot(qtype, raw_w, x)
            scalar = t.vec_dot(id_of(qtype), raw_w, x, "scalar")
            simd = t.vec_dot(id_of(qtype), raw_w, x, isa)
            assert abs(simd - scalar) <= rtol * scale, (n, simd, scalar)


def test_vec_dot_rejects_an_isa_this_cpu_lacks_or_does_not_know():
    raw = random_row(GT.Q8_0, 32, np.random.default_rng(0))
    x = np.zeros(32, dtype=np.float32)
    with pytest.raises(ValueError, match="unknown instruction set"):
        t.vec_dot(int(GT.Q8_0), raw, x, "sse9")
    for isa in ("avx2", "avx512", "avx512vnni"):
        if isa not in t.cpu_isas():
            with pytest.raises(ValueError, match="not supported by this CPU"):
                t.vec_dot(int(GT.Q8_0), raw, x, isa)


def test_scalar_is_always_available_and_best_is_one_of_the_supported():
    isas = t.cpu_isas()
    assert isas[0] == "scalar"
    assert t.best_isa() == isas[-1]
