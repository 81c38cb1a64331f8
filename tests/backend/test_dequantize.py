"""The scalar reference dequantizers agree with gguf.quants.dequantize, the
independent Python implementation of ggml's formats."""

import numpy as np
import pytest
from gguf import quants

from muser._core import _testing as t

from kernel_cases import (
    ALL_TYPES, GGUF_QUANTIZABLE, TOLERANCES, block_geometry, id_of, random_matrix, random_row,
    row_lengths,
)


def assert_dequantize_matches_gguf(qtype, raw, n):
    expected = quants.dequantize(raw, qtype).reshape(-1).astype(np.float32)
    got = t.dequantize(id_of(qtype), raw, n)
    atol = TOLERANCES[qtype][0]
    if atol == 0:
        assert np.array_equal(got, expected), f"{qtype.name}: max diff {np.abs(got - expected).max()}"
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=atol)


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
def test_random_valid_blocks_dequantize_like_gguf(qtype):
    rng = np.random.default_rng(id_of(qtype))
    for n in row_lengths(qtype):
        assert_dequantize_matches_gguf(qtype, random_row(qtype, n, rng), n)


@pytest.mark.parametrize("qtype", GGUF_QUANTIZABLE, ids=lambda q: q.name)
def test_gguf_quantized_data_dequantizes_like_gguf(qtype):
    rng = np.random.default_rng(100 + id_of(qtype))
    for n in row_lengths(qtype):
        x = rng.standard_normal((1, n)).astype(np.float32)
        raw = quants.quantize(x, qtype).reshape(-1).view(np.uint8)
        assert_dequantize_matches_gguf(qtype, raw, n)


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
def test_dequantize_rows_gathers_the_requested_rows(qtype):
    rng = np.random.default_rng(7)
    elems, _ = block_geometry(qtype)
    n_in, n_out = 2 * max(elems, 32), 9
    raw = random_matrix(qtype, n_in, n_out, rng)
    full = t.dequantize(id_of(qtype), raw, n_in * n_out).reshape(n_out, n_in)
    ids = [8, 0, 3, 3]
    assert np.array_equal(t.dequantize_rows(id_of(qtype), raw, n_in, n_out, ids), full[ids])


def test_dequantize_rows_rejects_an_out_of_range_id():
    raw = random_matrix(ALL_TYPES[3], 32, 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="row id 4 out of range"):
        t.dequantize_rows(id_of(ALL_TYPES[3]), raw, 32, 4, [0, 4])
    with pytest.raises(ValueError, match="row id -1 out of range"):
        t.dequantize_rows(id_of(ALL_TYPES[3]), raw, 32, 4, [-1])


def test_dequantize_rejects_a_buffer_of_the_wrong_size():
    with pytest.raises(ValueError, match="must be 18 bytes, got 17"):
        t.dequantize(2, np.zeros(17, dtype=np.uint8), 32)


def test_dequantize_rejects_a_length_that_is_not_a_block_multiple():
    with pytest.raises(ValueError, match="multiple of 256"):
        t.dequantize(12, np.zeros(144, dtype=np.uint8), 255)


def test_dequantize_rejects_an_unsupported_type_by_name():
    with pytest.raises(ValueError, match="IQ2_XXS"):
        t.dequantize(16, np.zeros(66, dtype=np.uint8), 256)
