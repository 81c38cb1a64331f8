"""Each CUDA op against its oracle: the scalar reference kernels (through
_core._testing) or NumPy, with the one tolerance table of the CPU tests;
and the batch invariance of the row-wise kernels, bitwise."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT

from muser._core import _testing as t
from tests.backend.kernel_cases import ALL_TYPES, block_geometry, id_of, random_matrix, random_row

# Float accumulation order differs from the scalar kernels (lanes, then a
# butterfly), the integer parts are exact: relative to sum |w_i x_i|.
DOT_RTOL = {q: 2e-6 for q in ALL_TYPES}
for _q in (GT.F32, GT.F16, GT.BF16):
    DOT_RTOL[_q] = 1e-5


def row_length(qtype: GT, blocks: int) -> int:
    elems, _ = block_geometry(qtype)
    return blocks * max(elems, 32)


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
@pytest.mark.parametrize("shape", [(1, 33, 1), (3, 100, 2), (4, 31, 3), (13, 64, 18)],
                         ids=lambda s: f"rows{s[0]}-out{s[1]}-blocks{s[2]}")
def test_matvec_matches_the_scalar_reference(qtype, shape):
    n_rows, n_out, blocks = shape
    k = row_length(qtype, blocks if block_geometry(qtype)[0] != 256 else min(blocks, 6))
    rng = np.random.default_rng(n_out * 7 + id_of(qtype))
    raw = random_matrix(qtype, k, n_out, rng)
    x = rng.standard_normal((n_rows, k)).astype(np.float32)
    gpu = t.cuda_matvec(id_of(qtype), raw, n_out, x)
    ref = t.matmul(id_of(qtype), raw, k, n_out, x, threads=1, isa="scalar")
    w = t.dequantize(id_of(qtype), raw, k * n_out).reshape(n_out, k).astype(np.float64)
    scale = np.abs(x).astype(np.float64) @ np.abs(w).T + 1e-30
    assert np.all(np.abs(gpu - ref) <= DOT_RTOL[qtype] * scale * 4), np.max(np.abs(gpu - ref) / scale)


@pytest.mark.parametrize("qtype", [GT.Q4_0, GT.Q4_K, GT.Q6_K, GT.F16, GT.Q8_0, GT.Q5_1], ids=lambda q: q.name)
def test_a_matvec_row_is_bitwise_the_same_alone_in_any_group_and_in_prefill_tiles(qtype):
    rng = np.random.default_rng(5)
    k = row_length(qtype, 4 if block_geometry(qtype)[0] == 256 else 16)
    n_out = 96
    raw = random_matrix(qtype, k, n_out, rng)
    x = rng.standard_normal((13, k)).astype(np.float32)
    everything = t.cuda_matvec(id_of(qtype), raw, n_out, x)  # tiles of 8
    for r in range(13):
        alone = t.cuda_matvec(id_of(qtype), raw, n_out, x[r:r + 1])
        assert np.array_equal(alone[0], everything[r])
    for group in ([3, 0], [7, 2, 11], [12, 5, 1, 9], [9, 1, 5, 12]):
        y = t.cuda_matvec(id_of(qtype), raw, n_out, np.ascontiguousarray(x[group]))
        assert np.array_equal(y, everything[group])


# The decode kernel configs (csrc/backend/cuda/cuda_ops.h, DecodeConfig):
# (weight rows per warp, units per lane in flight, weight rows spread across
# a warp's lanes).
DECODE_CONFIGS = [(1, 1, 1), (2, 1, 1), (2, 2, 1), (4, 1, 1), (4, 2, 1), (1, 1, 8), (1, 2, 8)]
# Row groups of a 9-row batch: every size 1..4, orders, a repeated row.
DECODE_GROUPS = [[4], [8], [0, 7], [7, 0], [2, 5, 8], [8, 2, 5], [1, 3, 6, 0], [6, 0, 3, 1], [5, 5, 2, 5]]


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
@pytest.mark.parametrize("k", [576, 4096, 14336])
def test_every_decode_config_gives_each_row_the_bits_of_the_prefill_tiles(qtype, k):
    """Each decode kernel config, and the one matvec picks, computes a row's
    outputs bitwise as the prefill tiles do, alone and in any group and
    order. n_out 37 is no multiple of any config's rows per block (4 warps x
    1..4 rows, or 8 rows spread across the lanes), so the last block's
    extra weight rows are exercised. Q4_0 at k 4096 / 14336 (16-byte aligned
    rows) takes the wide loads, at 576 not; k 576 (18 units) leaves most
    lanes of a row without units."""
    elems, _ = block_geometry(qtype)
    if k % max(elems, 32):
        k = 512  # K-quant rows are whole 256-element super-blocks
    rng = np.random.default_rng(k + id_of(qtype))
    n_out = 37
    raw = random_matrix(qtype, k, n_out, rng)
    x = rng.standard_normal((9, k)).astype(np.float32)
    tiles = t.cuda_matvec(id_of(qtype), raw, n_out, x)  # 9 rows: a prefill tile of 8 and one of 1
    assert np.all(np.isfinite(tiles))
    configs = [(0, 0, True, 1)] + [(wr, un, wide, lr) for wr, un, lr in DECODE_CONFIGS for wide in (True, False)]
    for warp_rows, unroll, wide, lane_rows in configs:
        for group in DECODE_GROUPS:
            y = t.cuda_matvec(id_of(qtype), raw, n_out, np.ascontiguousarray(x[group]), warp_rows, unroll, wide,
                              lane_rows)
            assert np.array_equal(y, tiles[group]), (warp_rows, unroll, wide, lane_rows, group)


@pytest.mark.parametrize("qtype", [GT.Q4_0, GT.Q4_K, GT.Q6_K, GT.Q8_0, GT.F16], ids=lambda q: q.name)
@pytest.mark.parametrize("n_out", [1, 1030, 3000, 4100, 8195, 65540])
def test_the_decode_config_matvec_picks_keeps_rows_bitwise_at_every_matrix_height(qtype, n_out):
    """matvec picks its decode config from the type, n_out and the group
    size (one weight row per warp below 2048 or 8192 rows, 2 or 4 above,
    Q4_0 and Q4_K with their own bands from 4096 and 65536 rows): across
    those heights a row is bitwise the same alone, in groups of 2..4 and in
    a prefill tile."""
    k = 256
    rng = np.random.default_rng(n_out + id_of(qtype))
    raw = random_matrix(qtype, k, n_out, rng)
    x = rng.standard_normal((9, k)).astype(np.float32)
    tiles = t.cuda_matvec(id_of(qtype), raw, n_out, x)
    for group in DECODE_GROUPS:
        y = t.cuda_matvec(id_of(qtype), raw, n_out, np.ascontiguousarray(x[group]))
        assert np.array_equal(y, tiles[group]), group


@pytest.mark.parametrize("qtype", [GT.Q4_0, GT.Q4_K, GT.Q6_K, GT.Q8_0, GT.Q5_1, GT.BF16], ids=lambda q: q.name)
@pytest.mark.parametrize("n_outs", [(4096, 1024, 1024), (300, 37), (5, 0, 19), (8195,)],
                         ids=lambda n: "-".join(map(str, n)))
def test_matrices_sharing_an_input_in_one_launch_give_each_output_its_own_bits(qtype, n_outs):
    """matvec_targets (the backend's q/k/v and gate/up launch): each matrix's
    outputs are bitwise those of its own matvec, for 1..4 rows (one decode
    launch over all matrices, n_out 0 included) and for 9 rows (one matvec
    per matrix)."""
    elems, _ = block_geometry(qtype)
    k = 512 if elems == 256 else 576
    rng = np.random.default_rng(sum(n_outs) + id_of(qtype))
    ws = [random_matrix(qtype, k, n, rng) if n else np.zeros(0, np.uint8) for n in n_outs]
    x = rng.standard_normal((9, k)).astype(np.float32)
    alone = [t.cuda_matvec(id_of(qtype), w, n, x) for w, n in zip(ws, n_outs)]
    for group in DECODE_GROUPS + [list(range(9))]:
        ys = t.cuda_matvec_targets(id_of(qtype), ws, list(n_outs), np.ascontiguousarray(x[group]))
        assert len(ys) == len(n_outs)
        for y, ref in zip(ys, alone):
            assert np.array_equal(y, ref[group]), group


_SHARED_INPUT_CASES = [(100, (4096, 1024, 1024), 4096), (512, (4096, 1024, 1024), 4096), (100, (300, 37), 1024),
                       (100, (5, 0, 19), 576), (100, (200,), 14336)]


@pytest.mark.parametrize("qtype,n_rows,n_outs,k",
                         [(q, *case) for q in (GT.Q4_0, GT.Q8_0, GT.Q4_K) for case in _SHARED_INPUT_CASES
                          if case[2] % block_geometry(q)[0] == 0],
                         ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple) else getattr(v, "name", str(v)))
def test_matrices_sharing_an_input_in_one_gemm_launch_give_each_output_its_own_bits(qtype, n_rows, n_outs, k):
    """At prefill row counts matvec_targets runs the packed GEMM (Q4_0, Q4_K)
    as one launch over all the matrices, the activations packed once (a
    matrix without a packed copy, n_out 0, sends the call back to one GEMM
    per matrix; other types always take that): each matrix's outputs are
    bitwise those of its own matvec at the same rows and of the decode
    kernel in groups of 4. At 512 rows of llama3-8b's q/k/v Q4_0's launch
    takes the 128-output blocks (8 x 48 of them: every SM of a GPU of up to
    384), at 100 rows the 64-output ones; Q4_K's always the 64-output ones."""
    rng = np.random.default_rng(sum(n_outs) + k + id_of(qtype))
    ws = [random_matrix(qtype, k, n, rng) if n else np.zeros(0, np.uint8) for n in n_outs]
    x = rng.standard_normal((n_rows, k)).astype(np.float32)
    ys = t.cuda_matvec_targets(id_of(qtype), ws, list(n_outs), x)
    assert len(ys) == len(n_outs)
    for y, w, n in zip(ys, ws, n_outs):
        assert np.array_equal(y, t.cuda_matvec(id_of(qtype), w, n, x))
        if n:
            assert np.array_equal(y, t.cuda_matvec_groups(id_of(qtype), w, n, x, 4))


# Row lengths of each walk the packed copy takes (gemm_mma_parts.cuh, Walk):
# k / 32 / 32 units per class 1 (576: 18 units, most classes empty; 1024),
# 2 (2048), 3 walked as 4 (3072: a padding unit per class), 4 (4096) and
# 14 walked as 16 over two stages a class (14336, llama3-8b's ffn_down).
MMA_SPLITS = {576: (1, 2, 4), 1024: (1, 2, 4), 2048: (1, 2, 4, 8), 3072: (1, 2, 4, 8), 4096: (1, 2, 4, 8),
              14336: (1, 2, 4, 8)}
# The kernel on the GGUF blocks reads rows of a multiple of 8 blocks (every
# length above but 576) and cuts a tile's classes into 4 or 8 subtrees.
BLOCKS_SPLITS = (4, 8)


@pytest.mark.parametrize("k", sorted(MMA_SPLITS))
@pytest.mark.parametrize("n_out", [37, 200])
def test_the_tensor_core_decode_matvec_gives_each_row_the_bits_of_the_prefill_tiles(k, n_out):
    """The decode matvec on the tensor cores (Q4_0), on the packed copy
    and on the GGUF blocks: for groups of 1..4 rows in any order, and every
    cut of a 16-output tile's 32 classes into subtrees that each kernel
    allows (each subtree its own warp, joined at the tree's nodes), each
    row's outputs are bitwise those of the prefill tiles. n_out 37 ends
    inside a 16-output tile, 200 inside a block of tiles; 1024 and 3072
    end their rows inside the blocks kernel's last stage of 64 units."""
    rng = np.random.default_rng(k + n_out)
    raw = random_matrix(GT.Q4_0, k, n_out, rng)
    x = rng.standard_normal((9, k)).astype(np.float32)
    tiles = t.cuda_matvec(id_of(GT.Q4_0), raw, n_out, x)
    assert np.all(np.isfinite(tiles))
    kernels = [("packed", (0,) + MMA_SPLITS[k])]
    if k != 576:
        kernels += [("blocks", (0,) + BLOCKS_SPLITS), ("any", (0,))]
    for weights, splits in kernels:
        for split in splits:
            for group in DECODE_GROUPS:
                y = t.cuda_matvec_mma(id_of(GT.Q4_0), raw, n_out, np.ascontiguousarray(x[group]), split, weights)
                assert np.array_equal(y, tiles[group]), (weights, split, group)


def test_the_tensor_core_decode_matvec_refuses_what_it_cannot_cut_or_read():
    rng = np.random.default_rng(4)
    q4_576 = (GT.Q4_0, random_matrix(GT.Q4_0, 576, 16, rng), rng.standard_normal((3, 576)).astype(np.float32))
    q4_1024 = (GT.Q4_0, random_matrix(GT.Q4_0, 1024, 16, rng), rng.standard_normal((3, 1024)).astype(np.float32))
    q8_576 = (GT.Q8_0, random_matrix(GT.Q8_0, 576, 16, rng), q4_576[2])
    refusals = [
        (q4_576, 8, "packed", "cannot cut 4 stages into 8"),
        (q4_576, 3, "packed", "cannot cut 4 stages into 3"),
        # 576 = 18 blocks a row: not whole 16-byte runs, so only the packed copy.
        (q4_576, 0, "blocks", r"does not take Q4_0 weights with 3 rows of 576 \(blocks\)"),
        (q4_1024, 2, "blocks", "4 or 8 subtrees, not 2"),
        (q4_1024, 0, "gguf", "weights 'gguf' is not any, blocks or packed"),
        (q8_576, 0, "any", "no packed copy of Q8_0"),
    ]
    for (qtype, raw, x), split, weights, message in refusals:
        with pytest.raises(ValueError, match=message):
            t.cuda_matvec_mma(id_of(qtype), raw, 16, x, split, weights)


def test_a_decode_config_that_does_not_exist_is_refused():
    rng = np.random.default_rng(3)
    raw = random_matrix(GT.Q4_0, 64, 8, rng)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    with pytest.raises(ValueError, match="no decode kernel"):
        t.cuda_matvec(id_of(GT.Q4_0), raw, 8, x, 3, 1)
    with pytest.raises(ValueError, match="no decode kernel"):
        t.cuda_matvec(id_of(GT.Q4_0), raw, 8, x, 1, 4)
    with pytest.raises(ValueError, match="lane_rows 4"):
        t.cuda_matvec(id_of(GT.Q4_0), raw, 8, x, 1, 1, True, 4)
    with pytest.raises(ValueError, match="no decode kernel"):
        t.cuda_matvec(id_of(GT.Q4_0), raw, 8, x, 2, 1, True, 8)
    with pytest.raises(ValueError, match="1..4 rows"):
        t.cuda_matvec(id_of(GT.Q4_0), raw, 8, np.zeros((5, 64), np.float32), 2, 2)


def test_the_matvec_timer_measures_a_launch():
    """benchmarks/bench_cuda_matvec.py's timer: a positive time, bounded, for
    matvec's own config and a forced one; invalid repetitions are refused."""
    rng = np.random.default_rng(4)
    raw = random_matrix(GT.Q4_0, 4096, 256, rng)
    x = rng.standard_normal((4, 4096)).astype(np.float32)
    for config in ((0, 0, True), (4, 2, False), (1, 2, True, 8)):
        sec = t.cuda_time_matvec(id_of(GT.Q4_0), raw, 256, x, 3, *config)
        assert 0.0 < sec < 0.1
    with pytest.raises(ValueError):
        t.cuda_time_matvec(id_of(GT.Q4_0), raw, 256, x, 0)


@pytest.mark.parametrize("fmt", ["Q8_0", "Q8_1", "Q8_K"])
def test_activation_quantization_is_bitwise_the_reference(fmt):
    rng = np.random.default_rng(1)
    k = 512
    x = (rng.standard_normal((3, k)) * rng.uniform(0.01, 10, (3, 1))).astype(np.float32)
    x[1, :256] = 0.0  # an all-zero block
    q, d, s, bsum = t.cuda_quantize(fmt, x)
    for r in range(3):
        raw = t.quantize_activation(fmt, x[r], "scalar")
        if fmt == "Q8_K":
            blocks = raw.view(np.uint8).reshape(-1, 292)
            ref_d = blocks[:, 0:4].copy().view(np.float32).reshape(-1)
            ref_q = blocks[:, 4:260].copy().view(np.int8).reshape(-1)
            ref_bsum = blocks[:, 260:292].copy().view(np.int16).reshape(-1)
            assert np.array_equal(q[r], ref_q)
            assert np.array_equal(d.reshape(3, -1)[r], ref_d)
            assert np.array_equal(bsum.reshape(3, -1)[r], ref_bsum.astype(np.int32))
        else:
            size = 34 if fmt == "Q8_0" else 36
            blocks = raw.view(np.uint8).reshape(-1, size)
            ref_d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32).reshape(-1)
            ref_q = blocks[:, size - 32:].copy().view(np.int8).reshape(-1)
            assert np.array_equal(q[r], ref_q)
            assert np.array_equal(d.reshape(3, -1)[r], ref_d)
            if fmt == "Q8_1":
                ref_s = blocks[:, 2:4].copy().view(np.float16).astype(np.float32).reshape(-1)
                assert np.array_equal(s.reshape(3, -1)[r], ref_s)


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
def test_get_rows_dequantizes_bitwise_like_the_reference(qtype):
    rng = np.random.default_rng(2)
    k = row_length(qtype, 2)
    raw = random_matrix(qtype, k, 10, rng)
    ids = [9, 0, 4, 4]
    gpu = t.cuda_get_rows(id_of(qtype), raw, k, 10, ids)
    ref = t.dequantize(id_of(qtype), raw, k * 10).reshape(10, k)[ids]
    assert np.array_equal(gpu, ref)


def test_rms_norm_matches_numpy():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 576)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, 576).astype(np.float32)
    gpu = t.cuda_rms_norm(x, w, 1e-5)
    xd = x.astype(np.float64)
    ref = xd / np.sqrt((xd * xd).mean(axis=1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(gpu, ref, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("width", [64, 128, 480, 512, 576, 1000, 2048, 4096, 4100, 5376, 8192, 8224, 16384, 16500])
def test_rms_norm_at_every_block_size_and_rows_are_independent(width):
    """Each kernel: the strided one (widths under 512 or not a multiple of
    32: below, at and past the 16-per-thread register span of its largest
    block, odd warp counts), the one whose threads own 4 elements (multiples
    of 128 from 512 to 4096) and the one whose threads own 32-element blocks
    (the other multiples of 32 from 512 on; past 8192 a thread owns more
    than one block)."""
    rng = np.random.default_rng(width)
    x = (rng.standard_normal((6, width)) * rng.uniform(0.01, 30, (6, 1))).astype(np.float32)
    w = rng.uniform(0.5, 1.5, width).astype(np.float32)
    gpu = t.cuda_rms_norm(x, w, 1e-6)
    xd = x.astype(np.float64)
    ref = xd / np.sqrt((xd * xd).mean(axis=1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(gpu, ref, rtol=2e-6, atol=1e-7)
    for r in range(6):
        assert np.array_equal(t.cuda_rms_norm(np.ascontiguousarray(x[r:r + 1]), w, 1e-6)[0], gpu[r])


@pytest.mark.parametrize("fmt", ["Q8_0", "Q8_1"])
@pytest.mark.parametrize("width", [64, 480, 512, 576, 2048, 4096, 5376, 8224, 16384])
def test_rms_norm_quantized_writes_the_norm_and_exactly_its_quantization(fmt, width):
    """The fused decode-path norm: its floats bitwise rms_norm's, its Q8 bytes
    bitwise those the activation quantizer writes from those floats."""
    rng = np.random.default_rng(width + len(fmt))
    x = (rng.standard_normal((5, width)) * rng.uniform(0.01, 30, (5, 1))).astype(np.float32)
    x[2, :64] = 0.0  # all-zero blocks
    w = rng.uniform(0.5, 1.5, width).astype(np.float32)
    out, q, d, s = t.cuda_rms_norm_quantized(fmt, x, w, 1e-5)
    assert np.array_equal(out, t.cuda_rms_norm(x, w, 1e-5))
    ref_q, ref_d, ref_s, _ = t.cuda_quantize(fmt, out)
    assert np.array_equal(q, ref_q)
    assert np.array_equal(d, ref_d)
    assert np.array_equal(s, ref_s)
    assert len(s) == (5 * width // 32 if fmt == "Q8_1" else 0)
    one = t.cuda_rms_norm_quantized(fmt, np.ascontiguousarray(x[3:4]), w, 1e-5)
    assert np.array_equal(one[0][0], out[3]) and np.array_equal(one[1][0], q[3])


@pytest.mark.parametrize("fmt", ["F32", "Q8_0", "Q8_1"])
@pytest.mark.parametrize("width", [480, 576, 4096, 5376, 16384])
def test_add_rms_norm_writes_the_sum_the_norm_and_its_quantization(fmt, width):
    """The residual add fused into the next norm (in place over a, as the
    backend runs it): the sums bitwise a + b, the norm bitwise rms_norm's of
    them, the Q8 bytes bitwise cuda_quantize's of the norm."""
    rng = np.random.default_rng(width + len(fmt) + 1)
    a = (rng.standard_normal((4, width)) * 3).astype(np.float32)
    b = rng.standard_normal((4, width)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, width).astype(np.float32)
    total, out, q, d, s = t.cuda_add_rms_norm(fmt, a, b, w, 1e-5)
    assert np.array_equal(total, a + b)
    assert np.array_equal(out, t.cuda_rms_norm(a + b, w, 1e-5))
    if fmt == "F32":
        assert q.size == 0 and d.size == 0 and s.size == 0
    else:
        ref_q, ref_d, ref_s, _ = t.cuda_quantize(fmt, out)
        assert np.array_equal(q, ref_q) and np.array_equal(d, ref_d) and np.array_equal(s, ref_s)


def _rope_reference(x, n_heads, head_dim, n_rot, neox, positions, inv_freq, position_scale):
    """Rows of x rotated in float64 (cos/sin rounded to float32 as the kernel
    takes them): the first n_rot dims of each head, pairs (i, i + n_rot/2)
    for neox, (2i, 2i + 1) otherwise, by position * position_scale * inv_freq."""
    ref = x.astype(np.float64).reshape(len(positions), n_heads, head_dim).copy()
    half = n_rot // 2
    a_idx = np.arange(half) if neox else 2 * np.arange(half)
    b_idx = a_idx + half if neox else a_idx + 1
    for r, p in enumerate(positions):
        theta = p * position_scale * inv_freq
        c, s = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)
        a, b = ref[r][:, a_idx].copy(), ref[r][:, b_idx].copy()
        ref[r][:, a_idx] = a * c - b * s
        ref[r][:, b_idx] = a * s + b * c
    return ref.reshape(len(positions), -1)


@pytest.mark.parametrize("n_heads,head_dim,n_rot,neox", [(32, 128, 128, False), (8, 128, 128, True), (9, 64, 64, True),
                                                         (5, 256, 256, False), (1, 64, 32, False)])
def test_rope_over_head_groups_and_rows_are_independent(n_heads, head_dim, n_rot, neox):
    rng = np.random.default_rng(n_heads * head_dim)
    positions = [0, 3, 140, 4095, 131071]
    x = rng.standard_normal((5, n_heads * head_dim)).astype(np.float32)
    gpu = t.cuda_rope(x, n_heads, n_rot, neox, positions, 10000.0, 1.0)
    inv = 10000.0 ** (-2.0 * np.arange(n_rot // 2) / n_rot)
    ref = _rope_reference(x, n_heads, head_dim, n_rot, neox, positions, inv, 1.0)
    np.testing.assert_allclose(gpu, ref, rtol=1e-5, atol=1e-5)
    for r in range(5):
        alone = t.cuda_rope(np.ascontiguousarray(x[r:r + 1]), n_heads, n_rot, neox, [positions[r]], 10000.0, 1.0)
        assert np.array_equal(alone[0], gpu[r])


@pytest.mark.parametrize("n_heads_q,n_heads_k,head_dim,neox",
                         [(32, 8, 128, False), (9, 3, 64, True), (5, 1, 256, True)])
def test_rope_of_q_and_k_in_one_launch_is_bitwise_two_ropes(n_heads_q, n_heads_k, head_dim, neox):
    rng = np.random.default_rng(n_heads_q + head_dim)
    positions = [0, 140, 4095]
    q = rng.standard_normal((3, n_heads_q * head_dim)).astype(np.float32)
    k = rng.standard_normal((3, n_heads_k * head_dim)).astype(np.float32)
    rq, rk = t.cuda_rope_pair(q, n_heads_q, k, n_heads_k, head_dim, neox, positions, 500000.0)
    assert np.array_equal(rq, t.cuda_rope(q, n_heads_q, head_dim, neox, positions, 500000.0))
    assert np.array_equal(rk, t.cuda_rope(k, n_heads_k, head_dim, neox, positions, 500000.0))
    assert not np.array_equal(rq[1:], q[1:])


@pytest.mark.parametrize("case", [(32, 8, 128, 128, 128, False, 0, [0, 140, 4095]),
                                  (9, 3, 64, 32, 96, True, 0, [7, 0, 300]),
                                  (8, 5, 128, 64, 128, True, 100, [5, 140, 399])],
                         ids=["llama3", "partial-rotary-odd-heads", "ring"])
@pytest.mark.parametrize("writes", [[1, 1, 1], [1, 0, 1]], ids=["write", "replay-row"])
def test_rope_pair_with_the_kv_store_in_one_launch_is_bitwise_rope_pair_then_write_kv(case, writes):
    """rope_pair_kv (the backend's fused q/k rope + KvStore): q, k and both
    f16 planes bitwise those of rope_pair followed by write_kv, with partial
    rotation, head counts that are no multiple of the rope's head group,
    v wider or narrower than k, a ring layer and a row that must not write."""
    n_q, n_k, head_dim, n_rot, head_dim_v, neox, ring_rows, positions = case
    rng = np.random.default_rng(n_q + n_rot + sum(writes))
    q = rng.standard_normal((3, n_q * head_dim)).astype(np.float32)
    k = rng.standard_normal((3, n_k * head_dim)).astype(np.float32)
    v = rng.standard_normal((3, n_k * head_dim_v)).astype(np.float32)
    plane_rows = ring_rows if ring_rows else 4096
    args = (q, n_q, k, n_k, v, n_rot, neox, positions, 500000.0, plane_rows, ring_rows, writes)
    fused = t.cuda_rope_pair_kv(*args, True)
    apart = t.cuda_rope_pair_kv(*args, False)
    for got, ref in zip(fused, apart):
        assert np.array_equal(got, ref)
    rq, rk, k_plane, v_plane = fused
    assert np.array_equal(rk, t.cuda_rope(k, n_k, n_rot, neox, positions, 500000.0))
    for r, pos in enumerate(positions):
        row = pos % ring_rows if ring_rows else pos
        if writes[r]:
            assert np.array_equal(k_plane[row], rk[r].astype(np.float16).view(np.uint16))
            assert np.array_equal(v_plane[row], v[r].astype(np.float16).view(np.uint16))
        else:
            assert np.all(k_plane[row] == 0xFFFF) and np.all(v_plane[row] == 0xFFFF)


@pytest.mark.parametrize("kind", ["silu", "gelu_tanh"])
def test_glu_matches_numpy(kind):
    rng = np.random.default_rng(4)
    g = (rng.standard_normal(1000) * 4).astype(np.float32)
    u = rng.standard_normal(1000).astype(np.float32)
    gpu = t.cuda_glu(kind, g, u)
    gd = g.astype(np.float64)
    if kind == "silu":
        act = gd / (1 + np.exp(-gd))
    else:
        act = 0.5 * gd * (1 + np.tanh(np.sqrt(2 / np.pi) * (gd + 0.044715 * gd**3)))
    np.testing.assert_allclose(gpu, act * u, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmt", ["Q8_0", "Q8_1"])
@pytest.mark.parametrize("kind", ["silu", "gelu_tanh"])
def test_glu_quantized_writes_the_glu_and_exactly_its_quantization(fmt, kind):
    rng = np.random.default_rng(len(fmt) + len(kind))
    g = (rng.standard_normal((3, 1536)) * 4).astype(np.float32)
    u = rng.standard_normal((3, 1536)).astype(np.float32)
    u[1, 32:96] = 0.0  # all-zero blocks
    out, q, d, s = t.cuda_glu_quantized(fmt, kind, g, u)
    assert np.array_equal(out.reshape(-1), t.cuda_glu(kind, g.reshape(-1), u.reshape(-1)))
    ref_q, ref_d, ref_s, _ = t.cuda_quantize(fmt, out)
    assert np.array_equal(q, ref_q) and np.array_equal(d, ref_d) and np.array_equal(s, ref_s)
    assert len(s) == (3 * 1536 // 32 if fmt == "Q8_1" else 0)


def test_softcap_matches_numpy():
    x = np.linspace(-100, 100, 513).astype(np.float32)
    np.testing.assert_allclose(t.cuda_softcap(x, 30.0), 30.0 * np.tanh(x.astype(np.float64) / 30.0), rtol=1e-6,
                               atol=1e-5)


@pytest.mark.parametrize("neox", [False, True])
def test_rope_matches_numpy(neox):
    rng = np.random.default_rng(6)
    n_heads, head_dim, n_rot = 3, 64, 48
    positions = [0, 1, 17, 4095]
    x = rng.standard_normal((4, n_heads * head_dim)).astype(np.float32)
    divisors = list(rng.uniform(1, 8, n_rot // 2).astype(np.float32))
    gpu = t.cuda_rope(x, n_heads, n_rot, neox, positions, 500000.0, 0.5, divisors)
    inv = 500000.0 ** (-2.0 * np.arange(n_rot // 2) / n_rot) / np.array(divisors, dtype=np.float64)
    ref = _rope_reference(x, n_heads, head_dim, n_rot, neox, positions, inv, 0.5)
    np.testing.assert_allclose(gpu, ref, rtol=1e-5, atol=1e-5)


def _attention_reference(k, v, q, positions, n_head, n_head_kv, ring_rows, window, scale, tensor_cores=None):
    """float64 attention over the f16 planes. Where the layout runs on the
    tensor cores (tensor_cores None: as this process runs it), the queries
    are first scaled and rounded to f16 as the kernel rounds them (the keys
    are f16 already), so what is left between the two is the kernel's f16
    rounding of the softmax weights."""
    hd_k = k.shape[1] // n_head_kv
    hd_v = v.shape[1] // n_head_kv
    if tensor_cores is None:
        tensor_cores = t.cuda_attention_uses_tensor_cores(n_head, n_head_kv, hd_k, hd_v)
    if tensor_cores:
        q = (q.astype(np.float32) * np.float32(scale)).astype(np.float16)
        scale = 1.0
    kf = k.view(np.float16).astype(np.float64)
    vf = v.view(np.float16).astype(np.float64)
    group = n_head // n_head_kv
    out = np.zeros((len(positions), n_head * hd_v))
    for r, p in enumerate(positions):
        first = p + 1 - window if window and p + 1 > window else 0
        slots = [(pp % ring_rows) if ring_rows else pp for pp in range(first, p + 1)]
        for h in range(n_head):
            kvh = h // group
            qh = q[r, h * hd_k:(h + 1) * hd_k].astype(np.float64)
            keys = kf[slots, kvh * hd_k:(kvh + 1) * hd_k]
            s = keys @ qh * scale
            w = np.exp(s - s.max())
            w /= w.sum()
            out[r, h * hd_v:(h + 1) * hd_v] = w @ vf[slots, kvh * hd_v:(kvh + 1) * hd_v]
    return out


def _tolerance(n_head, n_head_kv, hd_k, hd_v):
    """(rtol, atol) against _attention_reference: the scalar kernels' float32
    rounding, or the tensor cores' f16 weights (each off by up to 2^-11 of
    itself, so the output by up to 2^-11 of the values' spread)."""
    if t.cuda_attention_uses_tensor_cores(n_head, n_head_kv, hd_k, hd_v):
        return 2e-3, 2e-3
    return 1e-4, 2e-5


@pytest.mark.parametrize("layout", ["global", "ring"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_attention_matches_numpy_and_rows_are_independent(layout, head_dim):
    rng = np.random.default_rng(head_dim)
    n_head, n_head_kv = 8, 2
    ring_rows, window = (300, 200) if layout == "ring" else (0, 0)
    plane_rows = 300 if layout == "ring" else 700
    k = rng.standard_normal((plane_rows, n_head_kv * head_dim)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((plane_rows, n_head_kv * head_dim)).astype(np.float16).view(np.uint16)
    positions = [0, 5, 129, 255, 256, 650] if layout == "global" else [0, 199, 200, 420, 650]
    q = (rng.standard_normal((len(positions), n_head * head_dim)) / np.sqrt(head_dim) * 3).astype(np.float32)
    gpu = t.cuda_attention(k, v, q, positions, n_head, n_head_kv, ring_rows, window, 1.0)
    ref = _attention_reference(k, v, q, positions, n_head, n_head_kv, ring_rows, window, 1.0)
    rtol, atol = _tolerance(n_head, n_head_kv, head_dim, head_dim)
    np.testing.assert_allclose(gpu, ref, rtol=rtol, atol=atol)
    for r in range(len(positions)):
        alone = t.cuda_attention(k, v, np.ascontiguousarray(q[r:r + 1]), [positions[r]], n_head, n_head_kv,
                                 ring_rows, window, 1.0)
        assert np.array_equal(alone[0], gpu[r])


def _kv_planes(rng, plane_rows, n_head_kv, head_dim_k, head_dim_v):
    k = rng.standard_normal((plane_rows, n_head_kv * head_dim_k)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((plane_rows, n_head_kv * head_dim_v)).astype(np.float16).view(np.uint16)
    return k, v


# Context lengths around the kernel's chunk edges (32, 64, 128 positions per
# block step by head size; 16 splits) and far past them.
LONG_POSITIONS = [0, 1, 2, 30, 31, 32, 63, 64, 65, 127, 128, 129, 139, 140, 511, 999, 1000, 1023, 1024, 1025,
                  2047, 2048, 3000, 4095]


@pytest.mark.parametrize("head_dims", [(64, 64), (128, 128), (256, 256), (96, 96), (160, 160), (128, 64),
                                       (64, 128)], ids=lambda d: f"k{d[0]}-v{d[1]}")
def test_attention_matches_numpy_at_every_context_length(head_dims):
    hd_k, hd_v = head_dims
    rng = np.random.default_rng(hd_k * 1000 + hd_v)
    n_head, n_head_kv = 4, 2
    k, v = _kv_planes(rng, 4096, n_head_kv, hd_k, hd_v)
    positions = LONG_POSITIONS
    q = (rng.standard_normal((len(positions), n_head * hd_k)) / np.sqrt(hd_k) * 3).astype(np.float32)
    scale = 1.0 / np.sqrt(hd_k)
    rtol, atol = _tolerance(n_head, n_head_kv, hd_k, hd_v)
    gpu = t.cuda_attention(k, v, q, positions, n_head, n_head_kv, 0, 0, scale)
    ref = _attention_reference(k, v, q, positions, n_head, n_head_kv, 0, 0, scale)
    np.testing.assert_allclose(gpu, ref, rtol=rtol, atol=atol)
    # Sharp softmaxes (one position dominating) too.
    gpu = t.cuda_attention(k, v, q * 8, positions, n_head, n_head_kv, 0, 0, scale)
    ref = _attention_reference(k, v, q * 8, positions, n_head, n_head_kv, 0, 0, scale)
    np.testing.assert_allclose(gpu, ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("ring_rows,window", [(300, 200), (160, 129), (4200, 4096), (64, 64), (40, 1)])
def test_attention_over_a_ring_with_a_sliding_window(ring_rows, window):
    rng = np.random.default_rng(ring_rows + window)
    n_head, n_head_kv, hd = 8, 1, 128
    k, v = _kv_planes(rng, ring_rows, n_head_kv, hd, hd)
    positions = sorted({0, 1, window - 1, window, window + 1, ring_rows - 1, ring_rows, ring_rows + 5,
                        2 * ring_rows + 17, 9000})
    q = (rng.standard_normal((len(positions), n_head * hd)) / np.sqrt(hd) * 3).astype(np.float32)
    gpu = t.cuda_attention(k, v, q, positions, n_head, n_head_kv, ring_rows, window, 0.5)
    ref = _attention_reference(k, v, q, positions, n_head, n_head_kv, ring_rows, window, 0.5)
    np.testing.assert_allclose(gpu, ref, *_tolerance(n_head, n_head_kv, hd, hd))


def test_attention_rows_are_bitwise_independent_of_group_order_and_tile():
    """The llama3-8b head layout (32 query heads over 8 KV heads, 128 dims):
    each row alone, in every group of 2..4 in several orders, and inside a
    70-row launch (two tiles of rows) gives the same bits; runs repeat."""
    rng = np.random.default_rng(12)
    n_head, n_head_kv, hd = 32, 8, 128
    k, v = _kv_planes(rng, 4096, n_head_kv, hd, hd)
    positions = [0, 140, 141, 4095, 63, 1000, 64, 2]
    q = (rng.standard_normal((len(positions), n_head * hd)) / np.sqrt(hd) * 3).astype(np.float32)
    scale = 1.0 / np.sqrt(hd)

    def run(rows):
        return t.cuda_attention(k, v, np.ascontiguousarray(q[rows]), [positions[i] for i in rows], n_head, n_head_kv,
                                0, 0, scale)

    alone = [run([i])[0] for i in range(len(positions))]
    ref = _attention_reference(k, v, q, positions, n_head, n_head_kv, 0, 0, scale)
    np.testing.assert_allclose(np.stack(alone), ref, *_tolerance(n_head, n_head_kv, hd, hd))
    for rows in ([0, 1], [1, 0], [3, 2, 1], [2, 3, 1], [0, 1, 2, 3], [3, 2, 1, 0], [5, 3, 7, 4], [6, 6, 1, 5]):
        y = run(rows)
        for j, i in enumerate(rows):
            assert np.array_equal(y[j], alone[i]), (rows, i)
    # 70 rows: the later ones fall in the second launch tile.
    many = [i % len(positions) for i in range(70)]
    y = run(many)
    for j, i in enumerate(many):
        assert np.array_equal(y[j], alone[i]), (j, i)
    assert np.array_equal(run(many), y)


def test_attention_launches_of_any_row_count_can_share_one_scratch():
    """A step's attention scratch serves every launch (decode groups of 1..4,
    prefill tiles up to 64): launches of other row counts on the same scratch
    keep every row's bits (the binding raises otherwise). The first GPU run of
    the fused fold placed its counters by row count and failed this way."""
    rng = np.random.default_rng(11)
    k, v = _kv_planes(rng, 4096, 8, 128, 128)
    positions = [int(p) for p in rng.integers(0, 4096, 70)]
    q = rng.standard_normal((70, 32 * 128)).astype(np.float32)
    t.cuda_attention_on_shared_scratch(k, v, q, positions, 32, 8, [5, 70, 1, 37, 4, 64, 70])
    with pytest.raises(ValueError):
        t.cuda_attention_on_shared_scratch(k, v, q, positions, 32, 8, [71])


@pytest.mark.parametrize("top", [0, 63, 64, 300])
def test_attention_launched_with_only_the_splits_its_rows_use_keeps_every_rows_bits(top):
    """The later launches of cuda_attention_on_shared_scratch get the
    positions on the host, as the backend's uncaptured prefill steps do, and
    launch only the splits their rows reach (one per 64 positions here, at
    most 16); the first launch has every split. Positions at most `top` keep
    the split count low, with rows on both sides of a chunk's edge, for the
    decode kernel (groups of 1 and 4) and the prefill kernel (5 rows on)."""
    rng = np.random.default_rng(12 + top)
    k, v = _kv_planes(rng, 512, 8, 128, 128)
    positions = [int(p) for p in rng.integers(0, top + 1, 70)]
    positions[:3] = [top, 0, min(top, 64)]
    q = rng.standard_normal((70, 32 * 128)).astype(np.float32)
    t.cuda_attention_on_shared_scratch(k, v, q, positions, 32, 8, [1, 4, 5, 70, 64, 70])


@pytest.mark.parametrize("fmt", ["Q8_0", "Q8_1"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_attention_quantized_writes_the_attention_and_exactly_its_quantization(fmt, head_dim):
    """The launch that also quantizes the output projection's input: its
    floats bitwise the plain attention's, its Q8 bytes bitwise those the
    activation quantizer writes from those floats; 70 rows span two launch
    tiles."""
    rng = np.random.default_rng(head_dim + len(fmt))
    n_head, n_head_kv = 8, 2
    k, v = _kv_planes(rng, 4096, n_head_kv, head_dim, head_dim)
    positions = [int(p) for p in rng.integers(0, 4096, 70)]
    q = rng.standard_normal((70, n_head * head_dim)).astype(np.float32)
    out, qs, d, s = t.cuda_attention_quantized(fmt, k, v, q, positions, n_head, n_head_kv, 0, 0, 0.1)
    assert np.array_equal(out, t.cuda_attention(k, v, q, positions, n_head, n_head_kv, 0, 0, 0.1))
    ref_q, ref_d, ref_s, _ = t.cuda_quantize(fmt, out)
    assert np.array_equal(qs, ref_q)
    assert np.array_equal(d, ref_d)
    assert np.array_equal(s, ref_s)


def test_the_attention_timer_measures_the_launch_and_repeats_its_bits():
    """benchmarks/bench_cuda_attention.py's timer: a positive time, bounded, and
    an invalid repetition count is refused. Its timed launches reuse one
    scratch with the output poisoned before each, and must give the first
    launch's bits (the binding raises otherwise): the per-(row, head)
    counters that pick the block folding the partials are left clean."""
    rng = np.random.default_rng(7)
    k, v = _kv_planes(rng, 4096, 8, 128, 128)
    q = rng.standard_normal((4, 32 * 128)).astype(np.float32)
    us = t.cuda_time_attention(k, v, q, [4095, 140, 0, 1000], 32, 8, 3)
    assert 0.0 < us < 10_000.0
    with pytest.raises(ValueError):
        t.cuda_time_attention(k, v, q, [4095, 140, 0, 1000], 32, 8, 0)


GEMM_TYPES = [GT.Q4_0, GT.Q8_0, GT.Q4_1, GT.Q5_0, GT.Q5_1]
GEMM_K_TYPES = [GT.Q4_K]
# (rows, n_out, k): llama3-8b's q/o (4096x4096), its FFN down (k 14336, 14 units
# per lane class), smollm2's shapes (k 576: 18 units, so lane classes without
# units), outputs not a multiple of the 64-wide tile, rows not a multiple of 64;
# every walk of the kernel (units per lane class 1, 2, 3-4 and 5-8, 9-16 padded
# to whole stages).
GEMM_SHAPES = [(5, 576, 1536), (16, 1536, 576), (17, 100, 4096), (64, 4096, 4096), (100, 1000, 1536),
               (130, 4096, 14336), (512, 4096, 4096), (20, 96, 3072), (9, 200, 5120), (33, 64, 9216),
               (6, 40, 1024)]
GEMM_LARGE = [(512, 4096, 14336)]


def _gemm_case(qtype: GT, shape: tuple[int, int, int], seed: int):
    n_rows, n_out, k = shape
    rng = np.random.default_rng(seed)
    raw = random_row(qtype, n_out * k, rng)  # rows back to back: one long row of blocks
    x = (rng.standard_normal((n_rows, k)) * rng.uniform(0.1, 4.0, (n_rows, 1))).astype(np.float32)
    return raw, x


def _dequantized_reference(qtype: GT, raw: np.ndarray, n_out: int, x: np.ndarray):
    """x @ W.T in float64 on the quantized activations the GPU multiplies, and
    the tolerance for the kernel's float32 scaling (plus, for Q4_1/Q5_1, the
    fp16 rounding of the activation block sums s)."""
    n_rows, k = x.shape
    fmt = "Q8_1" if qtype in (GT.Q4_1, GT.Q5_1) else "Q8_0"
    q, d, s, _ = t.cuda_quantize(fmt, x)
    xq = (q.reshape(n_rows, k // 32, 32).astype(np.float64) * d.reshape(n_rows, k // 32, 1)).reshape(n_rows, k)
    w = t.dequantize(id_of(qtype), raw, k * n_out).reshape(n_out, k).astype(np.float64)
    ref = xq @ w.T
    tol = 1e-5 * (np.abs(xq) @ np.abs(w).T) + 1e-30
    if fmt == "Q8_1":
        _, nbytes = block_geometry(qtype)
        m = raw.reshape(-1, nbytes)[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(n_out, k // 32)
        tol += 2.0 ** -10 * (np.abs(s.reshape(n_rows, k // 32).astype(np.float64)) @ np.abs(m).T)
    return ref, tol


def _check_gemm(qtype: GT, shape: tuple[int, int, int], seed: int, packed: bool = True) -> None:
    n_rows, n_out, k = shape
    raw, x = _gemm_case(qtype, shape, seed)
    gemm = t.cuda_gemm_mma(id_of(qtype), raw, n_out, x, packed=packed)
    dispatched = t.cuda_matvec(id_of(qtype), raw, n_out, x)  # the GEMM from 41 rows, else the tiles
    alone = t.cuda_matvec_groups(id_of(qtype), raw, n_out, x, 1)
    for r in range(n_rows):
        assert gemm[r].tobytes() == alone[r].tobytes(), (r, np.flatnonzero(gemm[r] != alone[r])[:8])
    if packed:
        assert dispatched.tobytes() == gemm.tobytes()
    groups = t.cuda_matvec_groups(id_of(qtype), raw, n_out, x, 4)
    assert groups.tobytes() == gemm.tobytes()
    if qtype in GEMM_K_TYPES:
        return  # the matvec's bits, checked above; its own tests hold it to the CPU's
    # The float reference on at most 64 of the rows (every row is checked
    # bitwise above; a float64 product of 512 x 4096 x 14336 is slow).
    sel = np.arange(0, n_rows, max(1, n_rows // 64))
    ref, tol = _dequantized_reference(qtype, raw, n_out, np.ascontiguousarray(x[sel]))
    err = np.abs(gemm[sel].astype(np.float64) - ref)
    assert np.all(err <= tol), float(np.max(err / tol))


@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=lambda s: f"rows{s[0]}-{s[1]}x{s[2]}")
@pytest.mark.parametrize("qtype", GEMM_TYPES, ids=lambda q: q.name)
def test_the_tensor_core_gemm_is_bitwise_the_matvec_row_by_row(qtype, shape):
    _check_gemm(qtype, shape, seed=shape[0] * 31 + shape[1] + id_of(qtype))


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "blocks"])
@pytest.mark.parametrize("shape", [s for s in GEMM_SHAPES if s[2] % 256 == 0],
                         ids=lambda s: f"rows{s[0]}-{s[1]}x{s[2]}")
@pytest.mark.parametrize("qtype", GEMM_K_TYPES, ids=lambda q: q.name)
def test_the_tensor_core_gemm_takes_k_quants_bitwise_the_matvec_row_by_row(qtype, shape, packed):
    """Q4_K's units are sub-blocks of 256-element super-blocks, each with a
    6-bit scale and min: the MMA gives the integer sum, the rest is the
    matvec's expression, so every row keeps the matvec's bits, on the packed
    copy (plain nibbles, d sc / 16 and d_min mn) and on the blocks."""
    _check_gemm(qtype, shape, seed=shape[0] * 37 + shape[1] + id_of(qtype), packed=packed)


@pytest.mark.parametrize("shape", [(5, 576, 1536), (130, 4096, 14336), (100, 1000, 1536)],
                         ids=lambda s: f"rows{s[0]}-{s[1]}x{s[2]}")
def test_the_first_gemm_version_on_q4_0_blocks_keeps_the_matvec_bits(shape):
    # Where a Q4_0 matrix has no packed copy (it did not fit), v1 reads the blocks.
    _check_gemm(GT.Q4_0, shape, seed=shape[0] * 41 + shape[1], packed=False)


def test_q4_k_gemm_keeps_the_matvec_bits_at_extreme_scales():
    """Q4_K super-blocks with d near the fp16 maximum, subnormal d and
    d_min, all-15 nibbles and 63 scales and mins (the largest d sc isum and
    d_min mn sums), against activation rows near +-127 per element and one
    row of 1e30 that overflows to inf: the packed and block GEMMs give the
    matvec's bits, inf and nan included."""
    rng = np.random.default_rng(12)
    n_out, k, n_rows = 64, 2048, 9
    blocks = rng.integers(0, 256, size=(n_out * k // 256, 144), dtype=np.uint8)
    blocks[::5, 4:16] = 0xFF  # every 6-bit scale and min 63
    blocks[::5, 16:] = 0xFF  # every nibble 15
    d = rng.uniform(-0.05, 0.05, (n_out * k // 256, 2)).astype(np.float16)
    d[::7, 0] = np.float16(60000.0)
    d[::11] = np.float16(6e-8)  # subnormal d and d_min
    d[::13, 1] = np.float16(-65504.0)
    blocks[:, 0:4] = d.view(np.uint8).reshape(-1, 4)
    raw = blocks.reshape(-1)
    x = rng.standard_normal((n_rows, k)).astype(np.float32)
    x[3] = np.where(x[3] > 0, 1.0, -1.0)
    x[2] = np.sign(x[2]) * 1e30
    alone = t.cuda_matvec_groups(id_of(GT.Q4_K), raw, n_out, x, 1)
    for packed in (True, False):
        gemm = t.cuda_gemm_mma(id_of(GT.Q4_K), raw, n_out, x, packed=packed)
        assert gemm.tobytes() == alone.tobytes(), (packed, np.argwhere(gemm.view(np.uint32) != alone.view(np.uint32))[:8])
    assert not np.all(np.isfinite(alone[2]))
    assert np.all(np.isfinite(alone[[0, 1, 3]]))


@pytest.mark.parametrize("shape", GEMM_LARGE, ids=lambda s: f"rows{s[0]}-{s[1]}x{s[2]}")
@pytest.mark.parametrize("qtype", [GT.Q4_0, GT.Q8_0, GT.Q4_K], ids=lambda q: q.name)
def test_the_tensor_core_gemm_on_a_full_prefill_chunk_of_the_ffn_down(qtype, shape):
    _check_gemm(qtype, shape, seed=3 + id_of(qtype))


@pytest.mark.parametrize("n_rows", [1, 2, 3, 4, 63, 65])
def test_the_gemm_at_decode_row_counts_and_tile_edges(n_rows):
    # Any row count gives the matvec's bits; 1..4 never reach it through matvec().
    raw, x = _gemm_case(GT.Q4_0, (n_rows, 72, 1024), seed=n_rows)
    gemm = t.cuda_gemm_mma(id_of(GT.Q4_0), raw, 72, x)
    assert gemm.tobytes() == t.cuda_matvec_groups(id_of(GT.Q4_0), raw, 72, x, 1).tobytes()


def test_the_gemm_keeps_infinities_and_extreme_blocks_like_the_matvec():
    # Q8_0 blocks of all -128 against activation blocks at +-127 (the largest
    # block sums, 2^19 in magnitude) and a huge scale that overflows to inf in
    # some products: the same bits (inf, -inf, nan) as the matvec.
    rng = np.random.default_rng(11)
    n_out, k, n_rows = 64, 2048, 9
    blocks = rng.integers(0, 256, size=(n_out * k // 32, 34), dtype=np.uint8)
    blocks[::7, 2:] = 0x80
    d = rng.uniform(-0.05, 0.05, n_out * k // 32).astype(np.float16)
    d[::13] = np.float16(60000.0)
    blocks[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    raw = blocks.reshape(-1)
    x = rng.standard_normal((n_rows, k)).astype(np.float32)
    x[2] = np.sign(x[2]) * 1e30
    gemm = t.cuda_gemm_mma(id_of(GT.Q8_0), raw, n_out, x)
    alone = t.cuda_matvec_groups(id_of(GT.Q8_0), raw, n_out, x, 1)
    assert gemm.tobytes() == alone.tobytes()
    assert not np.all(np.isfinite(gemm[2]))


def test_a_matrix_ending_off_a_4_byte_boundary_takes_the_matvec_tiles():
    # 37 rows of 33 Q4_0 blocks end 2 bytes past a word: the GEMM copies whole
    # words, so matvec() keeps such a matrix on the tiles (same bits), and the
    # GEMM itself refuses it.
    raw, x = _gemm_case(GT.Q4_0, (9, 37, 33 * 32), seed=4)
    y = t.cuda_matvec(id_of(GT.Q4_0), raw, 37, x)
    assert y.tobytes() == t.cuda_matvec_groups(id_of(GT.Q4_0), raw, 37, x, 1).tobytes()
    with pytest.raises(ValueError, match="refused"):
        t.cuda_gemm_mma(id_of(GT.Q4_0), raw, 37, x)


def test_the_gemm_refuses_types_without_a_kernel():
    raw, x = _gemm_case(GT.Q6_K, (8, 16, 256), seed=0)
    with pytest.raises(ValueError, match="no tensor-core GEMM"):
        t.cuda_gemm_mma(id_of(GT.Q6_K), raw, 16, x)


def test_the_packed_gemm_runs_where_the_device_gives_its_blocks_their_shared_memory():
    """Q4_0's packed GEMM needs 112 KiB of shared memory a block (its wide
    block 210 KiB, taken only where that fits too), Q4_K's 128 KiB: on
    compute capability 9.0 (227 KiB a block) they run and their weight
    copies are made; on a device with less (8.6 and 8.9: 99 KiB) v1 reads
    the blocks and no copy is made. Other types never pack."""
    optin = t.cuda_shared_memory_per_block_optin()
    assert optin > 0
    assert t.cuda_gemm_packs(id_of(GT.Q4_0)) == (optin >= 112 * 1024)
    assert t.cuda_gemm_packs(id_of(GT.Q4_K)) == (optin >= 128 * 1024)
    assert not t.cuda_gemm_packs(id_of(GT.Q8_0))
    assert not t.cuda_gemm_packs(id_of(GT.Q6_K))
