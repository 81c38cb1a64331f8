"""cpu::matmul: y = x @ W.T within the activation-quantization error, and
every output row is bitwise the same however it is batched or threaded."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from gguf import GGMLQuantizationType as GT

from muser._core import _testing as t

from kernel_cases import ALL_TYPES, block_geometry, id_of, random_matrix

ISAS = t.cpu_isas()


def input_size(qtype, blocks=2):
    elems, _ = block_geometry(qtype)
    return blocks * max(elems, 32)


def quantization_bound(qtype, w, x):
    """Per-element bound on |matmul - W x| from quantizing x (half a step per
    element, d itself rounded to fp16) plus float rounding slack."""
    fmt = t.activation_format(id_of(qtype))
    abs_w = np.abs(w).astype(np.float64)
    slack = 1e-5 * (np.abs(x).astype(np.float64) @ abs_w.T) + 1e-30
    if fmt == "F32":
        return slack
    block = 256 if fmt == "Q8_K" else 32
    amax = np.abs(x).reshape(x.shape[0], -1, block).max(axis=2).astype(np.float64)
    step = np.repeat(amax / 127.0, block, axis=1) * (1 + 2.0**-10)
    bound = (0.5 * step + np.abs(x) * 2.0**-10) @ abs_w.T
    if fmt == "Q8_1":  # the minimum's term uses fp16(d * sum(q))
        bound += 2e-3 * (np.abs(x).astype(np.float64) @ abs_w.T)
    return bound + slack


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
@pytest.mark.parametrize("n_out", [1, 31, 32, 33, 100])
def test_matmul_matches_numpy_within_the_quantization_error(qtype, n_out, isa):
    rng = np.random.default_rng(n_out + id_of(qtype))
    n_in = input_size(qtype)
    raw = random_matrix(qtype, n_in, n_out, rng)
    w = t.dequantize(id_of(qtype), raw, n_in * n_out).reshape(n_out, n_in)
    x = rng.standard_normal((3, n_in)).astype(np.float32)
    y = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=2, isa=isa)
    expected = x.astype(np.float64) @ w.astype(np.float64).T
    assert y.shape == (3, n_out)
    assert np.all(np.abs(y - expected) <= quantization_bound(qtype, w, x))


@pytest.mark.parametrize("qtype", [GT.Q4_0, GT.Q4_1, GT.Q8_0, GT.Q4_K, GT.Q6_K], ids=lambda q: q.name)
def test_matmul_equals_the_scalar_dot_of_the_quantized_rows(qtype):
    """The matmul of row r, output o is the kernel's vec_dot of those rows
    (on the GGUF blocks; packed layouts are checked against the scalar
    reference below)."""
    rng = np.random.default_rng(5)
    n_in, n_out = input_size(qtype, 3), 5
    raw = random_matrix(qtype, n_in, n_out, rng)
    x = rng.standard_normal((2, n_in)).astype(np.float32)
    row_bytes = raw.size // n_out
    for isa in ISAS:
        y = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=1, isa=isa, packed=False)
        for r in range(2):
            for o in range(n_out):
                dot = t.vec_dot(id_of(qtype), raw[o * row_bytes:(o + 1) * row_bytes], x[r], isa)
                assert y[r, o] == np.float32(dot)


@st.composite
def batch_cases(draw):
    qtype = draw(st.sampled_from(ALL_TYPES))
    n_rows = draw(st.sampled_from([2, 3, 4, 7, 64]))
    return (
        qtype,
        n_rows,
        draw(st.integers(0, n_rows - 1)),
        draw(st.sampled_from([1, 2, 3])),
        draw(st.sampled_from([1, 17, 33, 64, 129])),
        draw(st.sampled_from(ISAS)),
        draw(st.integers(0, 2**32 - 1)),
    )


@settings(max_examples=60, deadline=None, derandomize=True)
@given(batch_cases())
def test_a_row_is_bitwise_identical_alone_or_in_any_batch_and_thread_count(case):
    qtype, n_rows, position, threads, n_out, isa, seed = case
    rng = np.random.default_rng(seed)
    n_in = input_size(qtype)
    raw = random_matrix(qtype, n_in, n_out, rng)
    row = rng.standard_normal((1, n_in)).astype(np.float32)
    others = (rng.standard_normal((n_rows, n_in)) * rng.uniform(0.01, 100)).astype(np.float32)
    batch = others.copy()
    batch[position] = row[0]
    alone = t.matmul(id_of(qtype), raw, n_in, n_out, row, threads=1, isa=isa)
    batched = t.matmul(id_of(qtype), raw, n_in, n_out, batch, threads=threads, isa=isa)
    assert np.array_equal(batched[position], alone[0])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
def test_every_row_of_a_large_batch_equals_that_row_computed_alone(qtype, isa):
    # 37 rows: kernels may switch to a batched (GEMM) path for full groups of
    # rows and keep a row-at-a-time path for the rest; no row may notice.
    rng = np.random.default_rng(31 + id_of(qtype))
    n_in, n_out = input_size(qtype, 4), 21
    raw = random_matrix(qtype, n_in, n_out, rng)
    x = rng.standard_normal((37, n_in)).astype(np.float32)
    w = t.dequantize(id_of(qtype), raw, n_in * n_out).reshape(n_out, n_in)
    batched = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=1, isa=isa)
    assert np.all(np.abs(batched - x.astype(np.float64) @ w.astype(np.float64).T) <= quantization_bound(qtype, w, x))
    for r in (0, 15, 16, 31, 32, 36):
        alone = t.matmul(id_of(qtype), raw, n_in, n_out, x[r:r + 1], threads=1, isa=isa)
        assert np.array_equal(batched[r], alone[0]), f"row {r}"


@pytest.mark.parametrize("isa", ISAS)
def test_a_large_matmul_is_identical_on_one_and_two_threads(isa):
    rng = np.random.default_rng(9)
    n_in, n_out = 512, 300
    for qtype in (GT.Q4_1, GT.Q4_K, GT.F32):
        raw = random_matrix(qtype, n_in, n_out, rng)
        x = rng.standard_normal((70, n_in)).astype(np.float32)
        one = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=1, isa=isa)
        two = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=2, isa=isa)
        assert np.array_equal(one, two)


def test_matmul_rejects_mismatched_shapes_and_buffers():
    raw = random_matrix(GT.Q8_0, 64, 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="x must have 64 columns, got 32"):
        t.matmul(int(GT.Q8_0), raw, 64, 4, np.zeros((1, 32), dtype=np.float32))
    with pytest.raises(ValueError, match="must be 340 bytes"):
        t.matmul(int(GT.Q8_0), raw, 64, 5, np.zeros((1, 64), dtype=np.float32))
    with pytest.raises(ValueError, match="multiple of 32"):
        t.matmul(int(GT.Q8_0), raw, 63, 4, np.zeros((1, 63), dtype=np.float32))


def test_matmul_with_zero_rows_returns_an_empty_result():
    raw = random_matrix(GT.Q8_0, 64, 4, np.random.default_rng(0))
    y = t.matmul(int(GT.Q8_0), raw, 64, 4, np.zeros((0, 64), dtype=np.float32))
    assert y.shape == (0, 4)


PACKED_CASES = [(q, isa) for q in ALL_TYPES for isa in ISAS if t.has_packed_layout(id_of(q), isa)]


def test_the_scalar_table_never_repacks_weights():
    assert not any(t.has_packed_layout(id_of(q), "scalar") for q in ALL_TYPES)


@pytest.mark.skipif(not PACKED_CASES, reason="no kernel table on this CPU repacks weights")
@pytest.mark.parametrize("qtype,isa", PACKED_CASES, ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("n_out", [1, 15, 16, 17, 31, 32, 33, 100])
@pytest.mark.parametrize("blocks", [5, 65])
def test_a_packed_weight_gives_the_scalar_reference_bit_for_bit(qtype, isa, n_out, blocks):
    """The interleaved layouts replay the reference's float steps per block
    (tensor/reference_kernels.cpp), so every element equals the scalar table's,
    for any number of rows (every tile of activation rows), any tail of a
    16-row group, rows longer than one 32-block pass of the kernel (65
    blocks) and any thread count."""
    rng = np.random.default_rng(n_out * 7 + id_of(qtype) + blocks)
    n_in = input_size(qtype, blocks)
    raw = random_matrix(qtype, n_in, n_out, rng)
    # Up to 19 rows: every activation-row tile size of the kernels (1..8)
    # and tiles after full ones.
    x = (rng.standard_normal((19, n_in)) * rng.uniform(0.01, 100, size=(19, 1))).astype(np.float32)
    reference = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=1, isa="scalar")
    for threads in (1, 2, 3):
        for rows in (1, 4, 6, 8, 13, 19):
            packed = t.matmul(id_of(qtype), raw, n_in, n_out, x[:rows], threads=threads, isa=isa, packed=True)
            assert np.array_equal(packed, reference[:rows]), (threads, rows)


@pytest.fixture
def gemv_streams():
    """Restores the process-wide stream count a test sets."""
    yield t.set_gemv_streams
    t.set_gemv_streams(0)


@pytest.mark.skipif(not PACKED_CASES, reason="no kernel table on this CPU repacks weights")
@pytest.mark.parametrize("qtype,isa", PACKED_CASES, ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("streams", [1, 2, 3, 4])
def test_decode_sized_packed_calls_give_the_reference_bits_for_any_stream_count(qtype, isa, streams, gemv_streams):
    """One to four activation rows read 1-4 weight groups side by side
    (kernel_set.h, gemv_streams): every element stays the scalar reference's,
    for runs of groups cut short by the end of a chunk or of the tensor,
    partial last groups, and the chunking of 1-3 threads."""
    rng = np.random.default_rng(streams * 31 + id_of(qtype))
    n_in = input_size(qtype, 9)
    x = (rng.standard_normal((4, n_in)) * rng.uniform(0.01, 100, size=(4, 1))).astype(np.float32)
    for n_out in (16, 40, 64, 100, 130, 257):
        raw = random_matrix(qtype, n_in, n_out, rng)
        reference = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=1, isa="scalar")
        gemv_streams(streams)
        assert t.gemv_streams() == streams
        for threads in (1, 2, 3):
            for rows in (1, 2, 3, 4):
                packed = t.matmul(id_of(qtype), raw, n_in, n_out, x[:rows], threads=threads, isa=isa, packed=True)
                assert np.array_equal(packed, reference[:rows]), (n_out, threads, rows)
        gemv_streams(0)


@pytest.mark.skipif(not PACKED_CASES, reason="no kernel table on this CPU repacks weights")
@pytest.mark.parametrize("qtype,isa", PACKED_CASES, ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("streams", [1, 4])
def test_decode_sized_calls_of_wide_rows_give_the_reference_bits(qtype, isa, streams, gemv_streams):
    """One to four rows whose quantized activations outgrow L1 (130 blocks:
    22 KB for four Q8_0 rows, 152 KB for four Q8_K rows) are read in one
    pass over each weight group, as narrower ones (packed_tile); the bits
    stay the scalar reference's."""
    rng = np.random.default_rng(streams * 17 + id_of(qtype))
    n_in = input_size(qtype, 130)
    x = (rng.standard_normal((4, n_in)) * rng.uniform(0.01, 100, size=(4, 1))).astype(np.float32)
    for n_out in (40, 130):
        raw = random_matrix(qtype, n_in, n_out, rng)
        reference = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=1, isa="scalar")
        gemv_streams(streams)
        for threads in (1, 3):
            for rows in (1, 2, 3, 4):
                packed = t.matmul(id_of(qtype), raw, n_in, n_out, x[:rows], threads=threads, isa=isa, packed=True)
                assert np.array_equal(packed, reference[:rows]), (n_out, threads, rows)
        gemv_streams(0)


FOUR_BIT_PACKED_CASES = [(q, isa) for q, isa in PACKED_CASES if q in (GT.Q4_0, GT.Q4_1)]


@pytest.mark.skipif(not FOUR_BIT_PACKED_CASES, reason="no kernel table on this CPU repacks Q4_0 / Q4_1")
@pytest.mark.parametrize("qtype,isa", FOUR_BIT_PACKED_CASES, ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("streams", [1, 4])
def test_one_row_four_bit_dots_at_their_extremes_give_the_reference_bits(qtype, isa, streams, gemv_streams):
    """One row of Q4_0 / Q4_1 sums the high nibbles' products at 16 times
    their value and divides once per block (x86_kernels_512_packed_gemv.inc):
    nibbles all 15, all 0 or mixed, against activations quantized to +-127
    (constant-magnitude blocks) and to small values, give the reference's
    bits, so no sum wraps or rounds."""
    rng = np.random.default_rng(id_of(qtype) + streams)
    elems, nbytes = block_geometry(qtype)
    n_in, n_out = input_size(qtype, 7), 40
    raw = random_matrix(qtype, n_in, n_out, rng).reshape(-1, nbytes)
    quants = slice(nbytes - 16, nbytes)
    raw[0::4, quants] = 0xFF
    raw[1::4, quants] = 0x00
    raw[2::4, quants] = 0xF0
    x = np.where(rng.random((1, n_in)) < 0.5, -1.0, 1.0).astype(np.float32) * 37.0
    x[0, :32] = 37.0  # one block of +127s
    x[0, 32:64] = -37.0  # and one of -127s
    x[0, 64:96] = np.linspace(-1e-3, 1.0, 32)  # one of mostly small quants
    raw = raw.reshape(-1)
    reference = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=1, isa="scalar")
    gemv_streams(streams)
    for threads in (1, 3):
        packed = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=threads, isa=isa, packed=True)
        assert np.array_equal(packed, reference), threads
    gemv_streams(0)


def decode_split(qtype, n_in, n_out, threads, streams, gemv_streams, shares_stage=False):
    raw = random_matrix(qtype, n_in, n_out, np.random.default_rng(5))
    gemv_streams(streams)
    split = t.matmul_split(id_of(qtype), raw, n_in, n_out, 1, threads, "best", True, shares_stage)
    gemv_streams(0)
    tasks = [split["chunk"]] * (split["tail_first"] if split["tail_chunk"] else split["tasks"])
    if split["tail_chunk"]:
        tasks += [split["tail_chunk"]] * (split["tasks"] - split["tail_first"])
    assert sum(tasks) >= n_out > sum(tasks) - tasks[-1], split  # the tasks cover the outputs once
    return split, tasks


@pytest.mark.skipif(not t.has_packed_layout(int(GT.Q8_0)), reason="no packed Q8_0 layout on this CPU")
def test_decode_chunks_of_small_matrices_keep_every_thread_busy(gemv_streams):
    """matmul.cpp fit_decode_chunks: runs of 3 groups where runs of 4 leave
    a round one task long (smollm2's 576-row o and down projections: 9 tasks
    of 4 groups were 3 rounds at 4 threads and left 7 of 16 threads idle),
    for a matmul alone in its stage; one that shares it (q with k and v)
    keeps runs of 4."""
    for threads in (4, 16):
        split, tasks = decode_split(GT.Q8_0, 576, 576, threads, 4, gemv_streams)
        assert tasks == [48] * 12, (threads, split)
        assert decode_split(GT.Q8_0, 576, 576, threads, 4, gemv_streams, shares_stage=True)[1] == [64] * 9
    # A 12-group matrix alone at 16 threads: one group per task.
    assert decode_split(GT.Q8_0, 576, 192, 16, 4, gemv_streams)[1] == [16] * 12
    # llama-1b's 2048-row matrices keep runs of 4 groups.
    assert decode_split(GT.Q4_0, 2048, 2048, 16, 4, gemv_streams)[1] == [64] * 32


@pytest.mark.skipif(not t.has_packed_layout(int(GT.Q4_0)), reason="no packed Q4_0 layout on this CPU")
def test_decode_chunks_of_several_runs_end_in_one_run_tasks(gemv_streams):
    """The last half round of a decode matmul is one-run tasks, claimed last,
    so no thread waits for more than one run of another."""
    split, tasks = decode_split(GT.Q4_0, 2048, 2048, 4, 4, gemv_streams)
    assert tasks == [128] * 14 + [64] * 4, split
    split, tasks = decode_split(GT.Q4_0, 2048, 128256, 16, 4, gemv_streams)
    assert tasks[:54] == [2048] * 54 and set(tasks[54:]) == {64}, split
    assert sum(tasks[54:]) >= 16 * 2048 // 2  # at least half a round
    # One thread: no tail.
    assert decode_split(GT.Q4_0, 2048, 2048, 1, 4, gemv_streams)[0]["tail_chunk"] == 0


@pytest.mark.skipif(not PACKED_CASES, reason="no kernel table on this CPU repacks weights")
@pytest.mark.parametrize("qtype,isa", PACKED_CASES, ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("streams", [1, 3, 4])
def test_decode_splits_with_tails_give_the_reference_bits(qtype, isa, streams, gemv_streams):
    """Decode calls planned for 2-16 threads (chunks of 1-4 group runs, then
    one-run tail tasks), run on 1-3 threads: every element the scalar
    reference's."""
    rng = np.random.default_rng(streams * 5 + id_of(qtype))
    n_in = input_size(qtype, 3)
    x = (rng.standard_normal((4, n_in)) * rng.uniform(0.01, 100, size=(4, 1))).astype(np.float32)
    gemv_streams(streams)
    tails = 0
    for n_out in (200, 1000):
        raw = random_matrix(qtype, n_in, n_out, rng)
        reference = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=1, isa="scalar")
        for plan_threads in (2, 3, 4, 16):
            split = t.matmul_split(id_of(qtype), raw, n_in, n_out, 1, plan_threads, isa, True)
            tails += split["tail_chunk"] != 0
            for threads in (1, 3):
                for rows in (1, 4):
                    got = t.matmul(id_of(qtype), raw, n_in, n_out, x[:rows], threads=threads, isa=isa, packed=True,
                                   plan_threads=plan_threads)
                    assert np.array_equal(got, reference[:rows]), (n_out, plan_threads, threads, rows)
    gemv_streams(0)
    assert tails > 0


def test_the_stream_count_is_checked_and_restorable(gemv_streams):
    default = t.gemv_streams()
    assert 1 <= default <= 4
    assert gemv_streams(3) == default
    assert gemv_streams(0) == 3
    assert t.gemv_streams() == default
    with pytest.raises(ValueError, match="gemv streams"):
        gemv_streams(5)
    assert t.gemv_streams() == default


@pytest.mark.skipif(not PACKED_CASES, reason="no kernel table on this CPU repacks weights")
def test_a_packed_prefill_batch_equals_its_rows_alone():
    rng = np.random.default_rng(77)
    for qtype, isa in PACKED_CASES:
        n_in, n_out = input_size(qtype, 3), 40
        raw = random_matrix(qtype, n_in, n_out, rng)
        x = rng.standard_normal((37, n_in)).astype(np.float32)
        batch = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=2, isa=isa)
        for r in (0, 3, 4, 36):
            alone = t.matmul(id_of(qtype), raw, n_in, n_out, x[r:r + 1], threads=1, isa=isa)
            assert np.array_equal(batch[r], alone[0]), (qtype.name, r)


# Prefill-sized calls cut their rows into blocks as well as their outputs
# into chunks (matmul.cpp split_rows); the split follows the thread count.
SPLIT_THREADS = [1, 2, 3, 5, 16, 64]


def test_a_prefill_split_cuts_rows_into_blocks_of_whole_row_tiles():
    raw = random_matrix(GT.Q4_0, 576, 576, np.random.default_rng(1))
    for n_rows in (1, 4, 63, 64, 65, 100, 512, 1000):
        for threads in SPLIT_THREADS:
            split = t.matmul_split(int(GT.Q4_0), raw, 576, 576, n_rows, threads)
            blocks = -(-n_rows // split["row_block"])
            chunks = -(-576 // split["chunk"])
            if split["tail_chunk"]:  # decode: one-run tasks after tail_first chunks
                assert n_rows <= 4
                chunks = split["tail_first"] + -(-(576 - split["tail_first"] * split["chunk"]) // split["tail_chunk"])
            assert split["tasks"] == blocks * chunks
            assert split["chunk"] % 16 == 0
            if n_rows < 64:
                assert split["row_block"] == n_rows  # decode and short calls: all rows per task
            elif split["row_block"] < n_rows:
                assert split["row_block"] % 8 == 0 and split["row_block"] >= 32
            # Enough tasks for every thread (four each) whenever the rows and outputs allow it.
            if n_rows >= 512:
                assert split["tasks"] >= 4 * threads, (n_rows, threads, split)
    # 512 rows at 16 threads: row blocks, not 36 chunks of 16 outputs over all rows.
    split = t.matmul_split(int(GT.Q4_0), raw, 576, 576, 512, 16)
    assert split["row_block"] < 512 and split["tasks"] % 16 == 0


SPLIT_TYPES = [GT.Q4_0, GT.Q4_1, GT.Q5_0, GT.Q8_0, GT.Q4_K, GT.Q6_K, GT.F16]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", SPLIT_TYPES, ids=lambda q: q.name)
def test_a_row_split_prefill_is_bitwise_the_unsplit_one_for_every_thread_count(qtype, isa):
    """Rows cut into blocks (any planned thread count, run on 1-3 threads)
    give the bits of tasks over all rows, packed or not; and a row keeps
    its bits alone, at a block boundary or in a block's last tile."""
    rng = np.random.default_rng(40 + id_of(qtype))
    n_in, n_out = input_size(qtype, 9), 70
    raw = random_matrix(qtype, n_in, n_out, rng)
    x = (rng.standard_normal((203, n_in)) * rng.uniform(0.01, 100, size=(203, 1))).astype(np.float32)
    for packed in (True, False):
        unsplit = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=1, isa=isa, packed=packed, split_rows=False)
        split_seen = False
        for plan_threads in SPLIT_THREADS:
            split = t.matmul_split(id_of(qtype), raw, n_in, n_out, len(x), plan_threads, isa, packed)
            split_seen = split_seen or split["row_block"] < len(x)
            for threads in (1, 3):
                got = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=threads, isa=isa, packed=packed,
                               plan_threads=plan_threads)
                assert np.array_equal(got.view(np.uint32), unsplit.view(np.uint32)), (packed, plan_threads, threads)
        assert split_seen, "no planned thread count split these rows"
        for r in (0, 31, 32, 63, 64, 199, 202):
            alone = t.matmul(id_of(qtype), raw, n_in, n_out, x[r:r + 1], threads=1, isa=isa, packed=packed)
            assert np.array_equal(alone[0].view(np.uint32), unsplit[r].view(np.uint32)), (packed, r)
