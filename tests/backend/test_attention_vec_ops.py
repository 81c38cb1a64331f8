"""The attention's vector primitives (cpu::F16VecOps), on every table this
machine runs: dot_rows / axpy_rows (a run of f16 cache rows per call) give
exactly the bits of converting each row with to_f32 and calling dot / axpy,
so attention scores and weighted sums do not depend on how positions are
grouped into runs; softmax is the softmax within a few ulp, element by
element independent of where a query's scores sit."""

from __future__ import annotations

import numpy as np
import pytest

from muser._core import _testing as t

ISAS = t.f16_vec_isas()
# Head sizes: the common ones, multiples of 8 and 32 (the SIMD paths), and
# ragged ones (the tails).
DIMS = [1, 7, 8, 24, 32, 40, 64, 72, 100, 128, 256]
ROW_COUNTS = [1, 2, 3, 7, 8, 9, 16, 17, 33]


def f16_rows(rng, n_rows, dim):
    return rng.standard_normal((n_rows, dim)).astype(np.float16).view(np.uint16)


def test_the_scalar_table_is_always_there():
    assert ISAS[0] == "scalar"


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dim", DIMS)
def test_dot_rows_equal_to_f32_then_dot_bit_for_bit(isa, dim):
    rng = np.random.default_rng(dim)
    for n_rows in ROW_COUNTS:
        q = rng.standard_normal(dim).astype(np.float32)
        keys = f16_rows(rng, n_rows, dim)
        batched = t.f16_vec_dot_rows(isa, q, keys, 0.125, False)
        composed = t.f16_vec_dot_rows(isa, q, keys, 0.125, True)
        np.testing.assert_array_equal(batched.view(np.uint32), composed.view(np.uint32))
        expected = keys.view(np.float16).astype(np.float64) @ q.astype(np.float64) * 0.125
        np.testing.assert_allclose(batched, expected, rtol=1e-5, atol=1e-5 * np.sqrt(dim))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dim", DIMS)
def test_axpy_rows_equal_to_f32_then_axpy_bit_for_bit(isa, dim):
    rng = np.random.default_rng(100 + dim)
    for n_rows in ROW_COUNTS:
        y = rng.standard_normal(dim).astype(np.float32)
        w = rng.random(n_rows).astype(np.float32)
        values = f16_rows(rng, n_rows, dim)
        batched = t.f16_vec_axpy_rows(isa, y, w, values, False)
        composed = t.f16_vec_axpy_rows(isa, y, w, values, True)
        np.testing.assert_array_equal(batched.view(np.uint32), composed.view(np.uint32))
        expected = y.astype(np.float64) + w.astype(np.float64) @ values.view(np.float16).astype(np.float64)
        np.testing.assert_allclose(batched, expected, rtol=1e-5, atol=1e-5 * n_rows)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dim", DIMS + [192, 200, 264])
def test_the_float32_row_entries_give_the_f16_row_entries_bits(isa, dim):
    """attend_block converts a chunk of cache rows once for a block of many
    queries (prefill) and calls dot_rows_f32 / axpy_rows_f32; a decode row's
    few queries read the f16 rows through dot_rows / axpy_rows. Both must
    give the same bits, or a row's logits would depend on how prefill was
    split. Covers the head sizes held in registers (64, 128) and the rest."""
    rng = np.random.default_rng(500 + dim)
    for n_rows in ROW_COUNTS + [32, 48, 65]:
        q = rng.standard_normal(dim).astype(np.float32)
        keys = f16_rows(rng, n_rows, dim)
        keys_f32 = np.ascontiguousarray(keys.view(np.float16).astype(np.float32))
        from_f16 = t.f16_vec_dot_rows(isa, q, keys, 0.125, False)
        from_f32 = t.f16_vec_dot_rows_f32(isa, q, keys_f32, 0.125)
        np.testing.assert_array_equal(from_f32.view(np.uint32), from_f16.view(np.uint32))

        # One to five queries sharing the rows in one call (pairs and an odd one).
        values = f16_rows(rng, n_rows, dim)
        values_f32 = np.ascontiguousarray(values.view(np.float16).astype(np.float32))
        for n_y in (1, 2, 3, 5):
            ys = rng.standard_normal((n_y, dim)).astype(np.float32)
            ws = rng.random((n_y, n_rows)).astype(np.float32)
            from_f32 = t.f16_vec_axpy_rows_f32(isa, ys, ws, values_f32)
            for j in range(n_y):
                from_f16 = t.f16_vec_axpy_rows(isa, ys[j], ws[j], values, False)
                np.testing.assert_array_equal(from_f32[j].view(np.uint32), from_f16.view(np.uint32))


def test_a_score_does_not_depend_on_the_rows_beside_it():
    # The same key row at every place of runs of several lengths.
    rng = np.random.default_rng(7)
    for isa in ISAS:
        q = rng.standard_normal(64).astype(np.float32)
        key = f16_rows(rng, 1, 64)
        alone = t.f16_vec_dot_rows(isa, q, key, 1.0, False)[0]
        for n_rows in (5, 8, 13):
            for at in range(n_rows):
                keys = f16_rows(rng, n_rows, 64)
                keys[at] = key[0]
                got = t.f16_vec_dot_rows(isa, q, keys, 1.0, False)[at]
                assert got.view(np.uint32) == alone.view(np.uint32), (isa, n_rows, at)


def test_unknown_tables_and_mismatched_shapes_are_typed_errors():
    q = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="no attention vector table"):
        t.f16_vec_dot_rows("no-such-isa", q, np.zeros((2, 8), np.uint16), 1.0, False)
    with pytest.raises(ValueError, match="columns"):
        t.f16_vec_dot_rows("scalar", q, np.zeros((2, 7), np.uint16), 1.0, False)
    with pytest.raises(ValueError, match="values must be"):
        t.f16_vec_axpy_rows("scalar", q, np.zeros(3, np.float32), np.zeros((2, 8), np.uint16), False)
    with pytest.raises(ValueError, match="no attention vector table"):
        t.f16_vec_softmax("no-such-isa", q)
    with pytest.raises(ValueError, match="columns"):
        t.f16_vec_dot_rows_f32("scalar", q, np.zeros((2, 7), np.float32), 1.0)
    with pytest.raises(ValueError, match="values must be"):
        t.f16_vec_axpy_rows_f32("scalar", np.zeros((1, 8), np.float32), np.zeros((1, 3), np.float32), np.zeros((2, 8), np.float32))


def softmax64(x):
    e = np.exp(x.astype(np.float64) - x.max())
    return e / e.sum()


@pytest.mark.parametrize("isa", ISAS)
def test_softmax_is_the_softmax_within_a_few_ulp(isa):
    rng = np.random.default_rng(3)
    for n in [1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 300, 513]:
        for spread in (0.1, 5.0, 40.0):
            x = (rng.standard_normal(n) * spread).astype(np.float32)
            got = t.f16_vec_softmax(isa, x).astype(np.float64)
            want = softmax64(x)
            # x - max is rounded to float32 first: its error grows with |x - max|.
            # and the float32 sum of n terms carries up to ~n/2 ulp into every weight.
            bound = (1e-6 * (1.0 + np.abs(x.astype(np.float64) - x.max())) + n * 6e-8) * want + 1e-37
            assert np.all(np.abs(got - want) <= bound), (n, spread, np.max(np.abs(got - want) / bound))
    # A row with one dominant score: the top weight is 1, the rest (nearly) 0
    # (SIMD tables flush what would be subnormal to 0; -inf gives exactly 0).
    x = np.array([0.0, -100.0, -200.0, -np.inf, -88.0], np.float32)
    got = t.f16_vec_softmax(isa, x)
    assert got[0] == 1.0 and np.all(got[1:] < 1e-37) and got[3] == 0.0


@pytest.mark.parametrize("isa", ISAS)
def test_softmax_of_an_element_depends_only_on_its_value_the_max_and_the_length(isa):
    # The same values at shifted places give the same weights (lanes are
    # interchangeable), so a query's weights do not depend on where its
    # scores start in the scratch buffer.
    rng = np.random.default_rng(11)
    x = rng.standard_normal(37).astype(np.float32)
    base = t.f16_vec_softmax(isa, x)
    padded = np.concatenate([np.zeros(5, np.float32), x])
    again = t.f16_vec_softmax(isa, padded[5:].copy())
    np.testing.assert_array_equal(base.view(np.uint32), again.view(np.uint32))


@pytest.mark.parametrize("isa", ISAS)
def test_softmax_keeps_nan_visible(isa):
    got = t.f16_vec_softmax(isa, np.array([0.0, np.nan, 1.0], np.float32))
    assert np.isnan(got).any()


AVX512_TABLES = [isa for isa in ISAS if isa.startswith("avx512")]


@pytest.mark.skipif("avx2" not in ISAS or not AVX512_TABLES, reason="needs the AVX2 and AVX-512 tables")
@pytest.mark.parametrize("isa", AVX512_TABLES)
@pytest.mark.parametrize("dim", DIMS + [192, 200, 256, 264])
def test_the_avx512_weighted_sums_are_the_avx2_bits(isa, dim):
    """vec_f16_avx512.cpp keeps axpy / axpy_rows bitwise the AVX2 table's
    (the same fused multiply-add per element and row, the same scalar tail),
    for 128-column blocks of 16-lane chains, 64-column blocks and tails; only
    its dot products have their own reduction order. (Tested wherever the
    CPU runs it, also where the engine prefers the AVX2 table: Zen 4.)"""
    rng = np.random.default_rng(300 + dim)
    for n_rows in ROW_COUNTS:
        y = rng.standard_normal(dim).astype(np.float32)
        w = rng.random(n_rows).astype(np.float32)
        values = f16_rows(rng, n_rows, dim)
        for composed in (False, True):
            avx2 = t.f16_vec_axpy_rows("avx2", y, w, values, composed)
            wide = t.f16_vec_axpy_rows(isa, y, w, values, composed)
            np.testing.assert_array_equal(wide.view(np.uint32), avx2.view(np.uint32))


@pytest.mark.skipif("avx2" not in ISAS or "avx512" not in ISAS, reason="needs the AVX2 and AVX-512 tables")
def test_the_avx512_softmax_gives_the_avx2_bits():
    """The AVX-512 table's softmax takes sixteen exponentials at a time but
    keeps the AVX2 table's eight-lane sum and per-element exp, so the weights
    are bitwise the AVX2 table's: every length around the 8/16 steps, wide and
    narrow spreads, zeros of both signs, -inf and NaN scores."""
    rng = np.random.default_rng(11)
    for n in list(range(1, 70)) + [127, 128, 129, 255, 511, 512, 513]:
        for spread in (0.01, 1.0, 30.0, 200.0):
            x = (rng.standard_normal(n) * spread).astype(np.float32)
            cases = [x]
            special = x.copy()
            special[rng.integers(0, n, max(1, n // 5))] = 0.0
            special[rng.integers(0, n, max(1, n // 7))] = -0.0
            if n > 2:
                special[rng.integers(0, n)] = -np.inf
            cases.append(special)
            with_nan = x.copy()
            with_nan[rng.integers(0, n)] = np.nan
            cases.append(with_nan)
            cases.append(np.zeros(n, np.float32) * -1.0)
            for case in cases:
                avx2 = t.f16_vec_softmax("avx2", case)
                wide = t.f16_vec_softmax("avx512", case)
                np.testing.assert_array_equal(wide.view(np.uint32), avx2.view(np.uint32), err_msg=f"n={n}")


@pytest.mark.skipif("avx512" not in ISAS, reason="needs the AVX-512 table")
def test_sixteen_row_runs_reduce_like_single_rows():
    # dot_rows sums sixteen rows' lanes in one transposed pass (sum16); each
    # row must still get the single-row reduction: the same key in every
    # place of a 16-row run, among rows of very different magnitudes.
    rng = np.random.default_rng(9)
    for dim in (16, 64, 80, 128):
        q = rng.standard_normal(dim).astype(np.float32)
        key = f16_rows(rng, 1, dim)
        alone = t.f16_vec_dot_rows("avx512", q, key, 0.5, False)[0]
        for at in range(16):
            keys = (rng.standard_normal((32, dim)) * 1e3).astype(np.float16).view(np.uint16)
            keys[at] = key[0]
            got = t.f16_vec_dot_rows("avx512", q, keys, 0.5, False)
            assert got[at].view(np.uint32) == alone.view(np.uint32), (dim, at)
