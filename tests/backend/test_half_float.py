"""The portable fp16/bf16 conversions agree with NumPy's IEEE conversions."""

import numpy as np

from muser._core import _testing as t


def test_every_fp16_pattern_converts_to_the_same_float_as_numpy():
    bits = np.arange(1 << 16, dtype=np.uint16)
    expected = bits.view(np.float16).astype(np.float32)
    got = t.fp16_to_fp32(bits)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), expected[~nan].view(np.uint32))


def test_fp32_to_fp16_rounds_to_nearest_even_like_numpy():
    rng = np.random.default_rng(1)
    with np.errstate(invalid="ignore"):
        every_half = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    values = np.concatenate([
        (rng.standard_normal(20000) * 10.0 ** rng.integers(-9, 6, 20000)).astype(np.float32),
        # every half value, the midpoints between neighbours and just off them
        every_half,
        np.array([0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e10, -1e10, np.inf, -np.inf,
                  2.0**-24, 2.0**-25, 2.0**-25 * 1.0001, 2.0**-14 - 2.0**-25], dtype=np.float32),
    ])
    values = values[~np.isnan(values)]
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16).view(np.uint16)
    got = t.fp32_to_fp16(values)
    assert np.array_equal(got, expected)
    # midpoints: x.5 ulp cases between consecutive halves
    halves = np.arange(0x0000, 0x7bff, dtype=np.uint16).view(np.float16).astype(np.float64)
    mids = ((halves[:-1] + halves[1:]) / 2).astype(np.float32)
    assert np.array_equal(t.fp32_to_fp16(mids), mids.astype(np.float16).view(np.uint16))


def test_fp32_to_fp16_keeps_nan_a_nan():
    got = t.fp32_to_fp16(np.array([np.nan], dtype=np.float32))
    assert np.isnan(got.view(np.float16)[0])


def test_fp32_to_bf16_rounds_to_nearest_even():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(10000).astype(np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    expected = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    assert np.array_equal(t.fp32_to_bf16(x), expected)
    # a tie rounds to the even neighbour
    tie = np.array([0x3F808000, 0x3F818000], dtype=np.uint32).view(np.float32)
    assert list(t.fp32_to_bf16(tie)) == [0x3F80, 0x3F82]
