"""Activation rows are quantized exactly as the NumPy statement of the
formats in activation_blocks.py says (bitwise), and the formats pair with the
weight types as llama.cpp pairs them."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT

from muser._core import _testing as t

import activation_blocks as ab


def sample_rows(n, rng):
    yield rng.standard_normal(n).astype(np.float32)
    yield (rng.standard_normal(n) * 1e-3).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    x[: n // 2] = 0.0  # all-zero blocks get d = 0 and zero quants
    yield x
    # exact ties: multiples of amax/254 land on .5 after scaling
    yield (np.arange(n) % 33 - 16).astype(np.float32) / np.float32(2.0)


@pytest.mark.parametrize("n", [32, 64, 96, 576])
def test_q8_0_matches_the_specification(n):
    for x in sample_rows(n, np.random.default_rng(n)):
        got = t.quantize_activation("Q8_0", x)
        assert got.tobytes() == ab.quantize_q8_0(x).tobytes()


@pytest.mark.parametrize("n", [32, 64, 96, 576])
def test_q8_1_matches_the_specification_including_its_scaled_sum(n):
    for x in sample_rows(n, np.random.default_rng(n + 1)):
        got = t.quantize_activation("Q8_1", x)
        assert got.tobytes() == ab.quantize_q8_0(x, with_sum=True).tobytes()


@pytest.mark.parametrize("n", [256, 512, 768, 1536])
def test_q8_k_matches_the_specification(n):
    for x in sample_rows(n, np.random.default_rng(n + 2)):
        got = t.quantize_activation("Q8_K", x)
        assert got.tobytes() == ab.quantize_q8_k(x).tobytes()


def test_q8_k_maps_the_largest_magnitude_to_minus_127_and_keeps_group_sums():
    x = np.random.default_rng(3).standard_normal(512).astype(np.float32)
    x[300] = 9.0
    blocks = ab.decode("Q8_K", t.quantize_activation("Q8_K", x))
    assert blocks[1]["qs"][300 - 256] == -127
    assert blocks[1]["d"] < 0
    assert np.array_equal(blocks["bsums"], blocks["qs"].astype(np.int32).reshape(2, 16, 16).sum(axis=2))


@pytest.mark.parametrize("fmt, block", [("Q8_0", 32), ("Q8_1", 32), ("Q8_K", 256)])
def test_quantized_activation_is_within_half_a_step_of_the_input(fmt, block):
    x = np.random.default_rng(4).standard_normal(4 * block).astype(np.float32)
    blocks = ab.decode(fmt, t.quantize_activation(fmt, x))
    step = np.abs(blocks["d"].astype(np.float64))
    error = np.abs(ab.dequantize(fmt, t.quantize_activation(fmt, x)) - x).reshape(-1, block)
    # fp16 storage of d adds a relative 2^-11 of the value on top of half a step
    bound = 0.5 * step[:, None] + np.abs(x.reshape(-1, block)) * 2.0**-10
    assert np.all(error <= bound)


SIMD_ISAS = [isa for isa in t.cpu_isas() if isa != "scalar"]


@pytest.mark.parametrize("isa", SIMD_ISAS)
@pytest.mark.parametrize("fmt, block", [("F32", 1), ("Q8_0", 32), ("Q8_1", 32), ("Q8_K", 256)])
def test_simd_quantizers_write_the_same_bytes_as_the_reference(fmt, block, isa):
    rng = np.random.default_rng(5)
    n = 3 * max(block, 256)
    rows = list(sample_rows(n, rng))
    special = rng.standard_normal(n).astype(np.float32)
    special[::7] = np.nan  # NaN never wins the max and quantizes to 0
    special[3], special[10] = 40.0, -40.0  # tie for largest magnitude: the first wins
    special[300:340] = 0.0
    rows.append(special)
    rows.append(np.full(n, -0.0, dtype=np.float32))
    rows.append((rng.standard_normal(n) * 1e30).astype(np.float32))
    for x in rows:
        with np.errstate(invalid="ignore"):
            assert t.quantize_activation(fmt, x, isa).tobytes() == t.quantize_activation(fmt, x, "scalar").tobytes()


def test_each_weight_type_takes_the_activation_format_llama_cpp_uses():
    expected = {
        GT.F32: "F32", GT.F16: "F32", GT.BF16: "F32",
        GT.Q4_0: "Q8_0", GT.Q5_0: "Q8_0", GT.Q8_0: "Q8_0",
        GT.Q4_1: "Q8_1", GT.Q5_1: "Q8_1",
        GT.Q2_K: "Q8_K", GT.Q3_K: "Q8_K", GT.Q4_K: "Q8_K", GT.Q5_K: "Q8_K", GT.Q6_K: "Q8_K",
    }
    assert {q: t.activation_format(int(q)) for q in expected} == expected


def test_quantize_activation_rejects_partial_blocks_and_unknown_formats():
    with pytest.raises(ValueError, match="multiple of 32"):
        t.quantize_activation("Q8_0", np.zeros(33, dtype=np.float32))
    with pytest.raises(ValueError, match="activation format must be"):
        t.quantize_activation("Q4_0", np.zeros(32, dtype=np.float32))
