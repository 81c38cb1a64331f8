"""The CPU backend's RMSNorm over several rows at once (cpu::rms_norm_rows):
each row's sum of squares is its own chain of double additions in index
order, so a row's result is the same bits whichever rows share the call and
wherever it sits among them, and equals the sequential float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

from muser._core import _testing as t


def reference(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """Row by row: the float64 sum of squares in index order (np.add.accumulate
    adds sequentially), its mean rounded to float32, then float32 arithmetic."""
    out = np.empty_like(x)
    for r, row in enumerate(x):
        sum_sq = np.add.accumulate(row.astype(np.float64) ** 2)[-1]
        mean = np.float32(sum_sq / row.size)
        scale = np.float32(1.0) / np.sqrt(np.float32(mean + np.float32(eps)))
        out[r] = (row * scale) * w
    return out


@pytest.mark.parametrize("n", [1, 3, 64, 576, 2048])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 8, 9, 13])
def test_each_row_is_the_sequential_reference_bit_for_bit(n, rows):
    rng = np.random.default_rng(n * 31 + rows)
    # Magnitudes spread over many binades so the double sums round often.
    x = (rng.standard_normal((rows, n)) * np.exp(rng.uniform(-8, 8, (rows, 1)))).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    got = t.cpu_rms_norm_rows(x, w, 1e-5, 0, rows)
    np.testing.assert_array_equal(got.view(np.uint32), reference(x, w, 1e-5).view(np.uint32))


def test_a_row_does_not_depend_on_the_rows_beside_it():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((11, 200)).astype(np.float32) * 50
    w = rng.standard_normal(200).astype(np.float32)
    alone = np.stack([t.cpu_rms_norm_rows(x, w, 1e-6, r, 1)[r] for r in range(11)])
    for first in range(4):
        for count in range(1, 11 - first + 1):
            got = t.cpu_rms_norm_rows(x, w, 1e-6, first, count)
            np.testing.assert_array_equal(
                got[first : first + count].view(np.uint32), alone[first : first + count].view(np.uint32)
            )


def test_bad_shapes_are_typed_errors():
    x = np.zeros((3, 8), np.float32)
    with pytest.raises(ValueError, match="one weight per column"):
        t.cpu_rms_norm_rows(x, np.zeros(7, np.float32), 1e-6, 0, 3)
    with pytest.raises(ValueError, match="within x"):
        t.cpu_rms_norm_rows(x, np.zeros(8, np.float32), 1e-6, 2, 2)
