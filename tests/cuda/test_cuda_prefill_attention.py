"""The prefill attention kernel (cuda::AttentionKernel::Prefill: a block
stages each K/V position once for several rows and the query heads of a KV
head) against the decode kernel, row by row and bitwise. On the layouts the
tensor cores take (heads of 64 or 128, up to 16 query heads per KV head:
llama3-8b, smollm2, the sliding window of 128 below) both choices run the one
tensor-core kernel, a prefill packing several rows into each MMA tile and a
decode row filling one alone, so these tests check that a row's bits do not
depend on the tile it shares.

The exactness contract makes a prompt's prefill and the decode of its last
token agree bit for bit, and a prefill the same in any chunking: so every
row must get from the prefill kernel exactly the decode kernel's bits, in any
segment of a session (start 0 or continuing one), at any warps per block, for
rows of several sessions in one launch, and on sliding-window rings past the
window (where each row's window starts one position later than the last's).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from muser._core import _testing as t
from tests.cuda.test_cuda_ops import _attention_reference

# name: (n_head, n_head_kv, head_dim, ring_rows, window, plane_rows, long start)
# Long starts put the segment's rows past 16 chunks (16 * 64, 16 * 128 and
# 16 * 32 positions for heads of 128, 64 and 256 in the scalar kernels,
# 16 * 128 in the tensor-core one), so a block takes several.
LAYOUTS = {
    "llama3-8b": (32, 8, 128, 0, 0, 2200, 1600),
    "sliding-128": (32, 8, 128, 1600, 1024, 1600, 1500),
    "smollm2": (9, 3, 64, 0, 0, 3200, 2600),
    "gemma3-sliding": (4, 1, 256, 1600, 1024, 1600, 1500),
    "gemma3-global": (8, 4, 256, 0, 0, 1300, 700),
}
SEGMENT_ROWS = [1, 2, 3, 5, 8, 17, 63, 64, 65, 130, 512]


def _case(name, seed):
    n_head, n_head_kv, hd, ring_rows, window, plane_rows, long_start = LAYOUTS[name]
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((plane_rows, n_head_kv * hd)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((plane_rows, n_head_kv * hd)).astype(np.float16).view(np.uint16)
    q = (rng.standard_normal((512, n_head * hd)) / np.sqrt(hd) * 3).astype(np.float32)
    return k, v, q, n_head, n_head_kv, hd, ring_rows, window, long_start


def _attend(k, v, q, positions, n_head, n_head_kv, ring_rows, window, hd, kernel, **kw):
    return t.cuda_attention(k, v, np.ascontiguousarray(q), [int(p) for p in positions], n_head, n_head_kv, ring_rows,
                            window, float(1.0 / np.sqrt(hd)), kernel, **kw)


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("start", ["0", "long"])
def test_prefill_kernel_gives_every_segment_row_the_decode_kernels_bits(name, start):
    """Segments of 1..512 consecutive rows of one session (the first rows of
    a 512-row prefill and the last ones), at position 0 or continuing a long
    session: each row bitwise the decode kernel's, and the last row the bits
    of decoding it alone."""
    k, v, q, n_head, n_head_kv, hd, ring_rows, window, long_start = _case(name, len(name) + len(start))
    p0 = 0 if start == "0" else long_start
    positions = np.arange(p0, p0 + 512)
    ref = _attend(k, v, q, positions, n_head, n_head_kv, ring_rows, window, hd, "decode")
    last = _attend(k, v, q[-1:], positions[-1:], n_head, n_head_kv, ring_rows, window, hd, "decode")
    assert np.array_equal(last[0], ref[-1])
    for n in SEGMENT_ROWS:
        for rows in (slice(0, n), slice(512 - n, 512)):
            got = _attend(k, v, q[rows], positions[rows], n_head, n_head_kv, ring_rows, window, hd, "prefill")
            mismatched = [i for i in range(got.shape[0]) if not np.array_equal(got[i], ref[rows][i])]
            assert not mismatched, (n, rows, mismatched[:5])
    # The backend's choice for a 512-row step is the prefill kernel; same bits.
    assert np.array_equal(_attend(k, v, q, positions, n_head, n_head_kv, ring_rows, window, hd, "auto"), ref)


@pytest.mark.parametrize("name", ["llama3-8b", "smollm2", "gemma3-sliding"])
@pytest.mark.parametrize("warps", [1, 2, 3, 4, 8, 12, 16])
def test_prefill_kernel_bits_do_not_depend_on_its_warps_per_block(name, warps):
    """Rows per block (warps // (4 shares x head sets), at least one) only
    change which rows share a staging; every row keeps the decode kernel's
    bits."""
    k, v, q, n_head, n_head_kv, hd, ring_rows, window, long_start = _case(name, warps)
    positions = np.arange(long_start - 60, long_start + 70)
    rows = slice(0, 130)
    ref = _attend(k, v, q[rows], positions, n_head, n_head_kv, ring_rows, window, hd, "decode")
    got = _attend(k, v, q[rows], positions, n_head, n_head_kv, ring_rows, window, hd, "prefill", prefill_warps=warps)
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("n_head,n_head_kv,hd_k,hd_v,warps", [
    (16, 16, 256, 256, 16),  # 4 rows a block over 35 positions of heads of 256: the largest staging
    (8, 2, 100, 100, 8),     # rows of 50 pairs (not a multiple of 4): staged a pair at a time
    (4, 2, 128, 64, 0),      # K and V heads of other sizes
    (6, 3, 160, 160, 12),    # heads short of 64 * pairs per lane
    (14, 2, 64, 64, 0),      # 7 heads per KV head: two sets of 4, the second with a copy it never folds
    (24, 2, 128, 128, 8),    # 12 heads per KV head: three sets of 4, 12 warps a row
])
def test_prefill_kernel_bits_at_the_largest_staging_and_uneven_heads(n_head, n_head_kv, hd_k, hd_v, warps):
    """The staging (K/V copied ahead into two shared-memory buffers, up to
    70 KiB per block) and the instantiations for heads not of 64 * NP
    dimensions: every row keeps the decode kernel's bits."""
    rng = np.random.default_rng(hd_k + hd_v + warps)
    k = rng.standard_normal((1300, n_head_kv * hd_k)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((1300, n_head_kv * hd_v)).astype(np.float16).view(np.uint16)
    q = (rng.standard_normal((130, n_head * hd_k)) / np.sqrt(hd_k) * 3).astype(np.float32)
    positions = np.arange(1100, 1230)
    ref = _attend(k, v, q, positions, n_head, n_head_kv, 0, 0, hd_k, "decode")
    got = _attend(k, v, q, positions, n_head, n_head_kv, 0, 0, hd_k, "prefill", prefill_warps=warps)
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("name", ["llama3-8b", "gemma3-sliding"])
@pytest.mark.parametrize("copies", [2, 3])
def test_prefill_kernel_rows_of_several_sessions_keep_their_bits(name, copies):
    """A launch whose rows alternate between sessions (other planes, same
    contents): the prefill kernel stages each session's rows separately and
    every row keeps the bits it has with one session."""
    k, v, q, n_head, n_head_kv, hd, ring_rows, window, long_start = _case(name, copies)
    positions = np.arange(long_start, long_start + 100)
    ref = _attend(k, v, q[:100], positions, n_head, n_head_kv, ring_rows, window, hd, "decode")
    for kernel in ("prefill", "decode"):
        got = _attend(k, v, q[:100], positions, n_head, n_head_kv, ring_rows, window, hd, kernel,
                      plane_copies=copies)
        assert np.array_equal(got, ref), kernel


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_prefill_kernel_rows_at_scattered_positions_keep_their_bits(name):
    """Rows in no order, far apart, repeated (decode rows and prefill rows of
    one step, or tests): windows that do not fit one staging are staged in
    rounds; every row keeps the decode kernel's bits."""
    k, v, q, n_head, n_head_kv, hd, ring_rows, window, long_start = _case(name, 5)
    rng = np.random.default_rng(len(name))
    top = long_start + 500
    positions = np.concatenate([rng.integers(0, top, 60), [0, 0, top, top - 1, 1, top]])
    n = len(positions)
    ref = _attend(k, v, q[:n], positions, n_head, n_head_kv, ring_rows, window, hd, "decode")
    got = _attend(k, v, q[:n], positions, n_head, n_head_kv, ring_rows, window, hd, "prefill")
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("fmt,name", [("Q8_0", "llama3-8b"), ("Q8_1", "smollm2"), ("Q8_0", "gemma3-sliding")])
def test_prefill_kernel_quantized_output_is_the_decode_kernels(fmt, name):
    """attention_quantized through the prefill kernel (the o-projection's
    input, quantized by the last warp of each row and head): floats and Q8
    bytes bitwise the decode kernel's."""
    k, v, q, n_head, n_head_kv, hd, ring_rows, window, long_start = _case(name, 9)
    positions = [int(p) for p in np.arange(long_start, long_start + 130)]
    args = (fmt, k, v, q[:130], positions, n_head, n_head_kv, ring_rows, window, float(1.0 / np.sqrt(hd)))
    got = t.cuda_attention_quantized(*args, "prefill")
    ref = t.cuda_attention_quantized(*args, "decode")
    for a, b in zip(got, ref):
        assert np.array_equal(a, b)


def test_prefill_kernel_limits_and_the_automatic_choice_past_them():
    """The prefill kernel takes up to 16 query heads per KV head; asked for
    more it refuses, and the automatic choice then keeps the decode kernel.
    Unknown kernels and warp counts are refused."""
    rng = np.random.default_rng(3)
    k = rng.standard_normal((300, 64)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((300, 64)).astype(np.float16).view(np.uint16)
    q = rng.standard_normal((40, 32 * 64)).astype(np.float32)
    positions = list(range(200, 240))
    with pytest.raises(ValueError):
        t.cuda_attention(k, v, q, positions, 32, 1, 0, 0, 0.125, "prefill")
    auto = t.cuda_attention(k, v, q, positions, 32, 1, 0, 0, 0.125, "auto")
    assert np.array_equal(auto, t.cuda_attention(k, v, q, positions, 32, 1, 0, 0, 0.125, "decode"))
    q16 = np.ascontiguousarray(q[:, :16 * 64])
    assert np.array_equal(t.cuda_attention(k, v, q16, positions, 16, 1, 0, 0, 0.125, "prefill"),
                          t.cuda_attention(k, v, q16, positions, 16, 1, 0, 0, 0.125, "decode"))
    with pytest.raises(ValueError):
        t.cuda_attention(k, v, q16, positions, 16, 1, 0, 0, 0.125, "flash")
    with pytest.raises(ValueError):
        t.cuda_attention(k, v, q16, positions, 16, 1, 0, 0, 0.125, "prefill", prefill_warps=17)


def test_rows_past_one_prefill_launch_keep_their_bits():
    """One launch of the prefill kernel takes up to 512 rows (a whole step,
    its partials in the scratch); a call of more rows runs launches one after
    the other over the same scratch, and every row keeps the decode kernel's
    bits."""
    n_head, n_head_kv, hd = LAYOUTS["llama3-8b"][:3]
    rng = np.random.default_rng(640)
    k = rng.standard_normal((800, n_head_kv * hd)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((800, n_head_kv * hd)).astype(np.float16).view(np.uint16)
    q = (rng.standard_normal((700, n_head * hd)) / np.sqrt(hd) * 3).astype(np.float32)
    positions = np.arange(60, 760)
    ref = _attend(k, v, q, positions, n_head, n_head_kv, 0, 0, hd, "decode")
    got = _attend(k, v, q, positions, n_head, n_head_kv, 0, 0, hd, "prefill")
    mismatched = [i for i in range(len(positions)) if not np.array_equal(got[i], ref[i])]
    assert not mismatched, mismatched[:5]


def test_the_tensor_cores_take_the_real_models_head_layouts():
    """llama3-8b (32 query heads over 8 KV heads of 128), llama-1b and
    smollm2 (heads of 64) and up to 16 query heads per KV head run on the
    tensor cores; heads of 256 (gemma3) or of other sizes, K and V heads of
    different sizes, heads of 32 (tiny test models) and more query heads per
    KV head keep the scalar kernels."""
    for layout in [(32, 8, 128, 128), (32, 8, 64, 64), (9, 3, 64, 64), (16, 1, 64, 64)]:
        assert t.cuda_attention_uses_tensor_cores(*layout), layout
    for layout in [(8, 4, 256, 256), (8, 2, 100, 100), (4, 2, 128, 64), (6, 3, 160, 160), (32, 1, 64, 64),
                   (4, 2, 16, 16), (4, 4, 32, 32)]:
        assert not t.cuda_attention_uses_tensor_cores(*layout), layout


def test_the_scalar_kernels_stay_available_for_a_b_runs():
    """MUSER_CUDA_ATTENTION_MMA=0 (read once per process) gives llama3-8b's
    layout the scalar kernels: float32 scores within 1e-4 of float64, other
    bits than the tensor cores' f16 weights, and still one set of bits for
    decode and prefill."""
    script = """
import sys
import numpy as np
from muser._core import _testing as t
rng = np.random.default_rng(9)
k = rng.standard_normal((300, 8 * 128)).astype(np.float16).view(np.uint16)
v = rng.standard_normal((300, 8 * 128)).astype(np.float16).view(np.uint16)
q = (rng.standard_normal((40, 32 * 128)) / np.sqrt(128) * 3).astype(np.float32)
pos = list(range(200, 240))
out = {kind: t.cuda_attention(k, v, q, pos, 32, 8, 0, 0, 0.125, kind) for kind in ("decode", "prefill")}
assert np.array_equal(out["decode"], out["prefill"])
print(int(t.cuda_attention_uses_tensor_cores(32, 8, 128, 128)))
np.save(sys.argv[1], out["decode"])
"""
    rng = np.random.default_rng(9)
    k = rng.standard_normal((300, 8 * 128)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((300, 8 * 128)).astype(np.float16).view(np.uint16)
    q = (rng.standard_normal((40, 32 * 128)) / np.sqrt(128) * 3).astype(np.float32)
    positions = list(range(200, 240))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "scalar.npy")
        env = dict(os.environ, MUSER_CUDA_ATTENTION_MMA="0")
        done = subprocess.run([sys.executable, "-c", script, path], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["0"]
        scalar = np.load(path)
    tensor = t.cuda_attention(k, v, q, positions, 32, 8, 0, 0, 0.125, "decode")
    assert t.cuda_attention_uses_tensor_cores(32, 8, 128, 128)
    ref = _attention_reference(k, v, q, positions, 32, 8, 0, 0, 0.125, tensor_cores=False)
    np.testing.assert_allclose(scalar, ref, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(tensor, ref, rtol=2e-3, atol=2e-3)
    assert not np.array_equal(scalar, tensor)
