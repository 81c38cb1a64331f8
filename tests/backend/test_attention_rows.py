"""Attention's fused f16 row primitives (F16VecOps::dot_rows / axpy_rows) give
the bits of the composed path they replace (to_f32 then dot / axpy, row by
row), for every table this machine runs, any row length (the vector bodies
and the scalar tails), any number of rows (eight-row groups and the rest)
and strided rows as in the KV cache."""

from __future__ import annotations

import numpy as np
import pytest

from muser import _core

T = _core._testing
LENGTHS = [1, 3, 7, 8, 9, 16, 31, 32, 33, 63, 64, 65, 72, 128, 200, 256]
ROW_COUNTS = [1, 2, 7, 8, 9, 16, 17, 64]


def f16_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.normal(0.0, 2.0, n).astype(np.float16).view(np.uint16)


@pytest.mark.parametrize("table", ["scalar", "best"])
@pytest.mark.parametrize("n", LENGTHS)
def test_fused_rows_equal_the_composed_path_bit_for_bit(table, n):
    rng = np.random.default_rng(n)
    for rows in ROW_COUNTS:
        stride = n + 24  # other heads' elements between rows, as in a KV plane
        bits = f16_bits(rng, (rows - 1) * stride + n)
        q = rng.normal(0.0, 1.0, n).astype(np.float32)
        weights = rng.random(rows).astype(np.float32)
        fused, composed, fused_sum, composed_sum = T.f16_rows(table, q, bits, stride, rows, 0.125, weights)
        assert fused.shape == (rows,) and fused_sum.shape == (n,)
        np.testing.assert_array_equal(fused.view(np.uint32), composed.view(np.uint32), err_msg=f"rows={rows}")
        np.testing.assert_array_equal(fused_sum.view(np.uint32), composed_sum.view(np.uint32), err_msg=f"rows={rows}")


def test_the_scores_are_the_scaled_dot_products():
    rng = np.random.default_rng(7)
    n, rows = 64, 9
    bits = f16_bits(rng, rows * n)
    q = rng.normal(0.0, 1.0, n).astype(np.float32)
    weights = rng.random(rows).astype(np.float32)
    scores, _, weighted, _ = T.f16_rows("best", q, bits, n, rows, 0.5, weights)
    keys = bits.view(np.float16).astype(np.float64).reshape(rows, n)
    np.testing.assert_allclose(scores, 0.5 * keys @ q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(weighted, weights @ keys, rtol=1e-5, atol=1e-5)


def test_bad_arguments_are_typed_errors():
    q = np.ones(8, np.float32)
    bits = np.zeros(8, np.uint16)
    with pytest.raises(ValueError, match="scalar' or 'best"):
        T.f16_rows("avx9", q, bits, 8, 1, 1.0, np.ones(1, np.float32))
    with pytest.raises(ValueError, match="row elements"):
        T.f16_rows("best", q, bits, 8, 2, 1.0, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="stride >= n"):
        T.f16_rows("best", q, bits, 4, 1, 1.0, np.ones(1, np.float32))
