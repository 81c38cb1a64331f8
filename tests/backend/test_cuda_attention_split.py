"""The split plan of the CUDA decode attention (csrc/backend/cuda/ops_attention.cu),
emulated on the host in float32: which block, warp and group scores each
visible position, and the three fixed-order folds (per warp online softmax,
warps into a block partial, splits into the row). Runs without a GPU, so the
plan's index arithmetic and fold math are checked here against a float64
reference; tests/cuda/test_cuda_ops.py checks the kernel itself.

The constants mirror the kernel's: kWarps, kSplits, group_positions().
"""

from __future__ import annotations

import numpy as np
import pytest

K_WARPS = 4
K_SPLITS = 16


def group_positions(np_pairs: int) -> int:
    return 32 if np_pairs == 1 else 16 if np_pairs == 2 else 8


def pairs_per_lane(head_dim_k: int, head_dim_v: int) -> int:
    return (max(head_dim_k, head_dim_v) + 63) // 64


def first_visible(pos: int, window: int) -> int:
    return pos + 1 - window if window > 0 and pos + 1 > window else 0


def plan(pos: int, window: int, np_pairs: int):
    """(split, warp, positions of one group) in the order the kernel folds them."""
    g = group_positions(np_pairs)
    chunk = K_WARPS * g
    first = first_visible(pos, window)
    n_chunks = (pos + 1 - first + chunk - 1) // chunk
    out = []
    for z in range(min(K_SPLITS, n_chunks)):
        for w in range(K_WARPS):
            for c in range(z, n_chunks, K_SPLITS):
                g0 = first + c * chunk + w * g
                count = min(g, pos + 1 - g0)
                if count > 0:
                    out.append((z, w, list(range(g0, g0 + count))))
    return out


def emulate(keys: np.ndarray, values: np.ndarray, q: np.ndarray, pos: int, window: int, scale: float) -> np.ndarray:
    """One (row, head): keys/values indexed by position, float32 throughout."""
    f32 = np.float32
    np_pairs = pairs_per_lane(keys.shape[1], values.shape[1])
    steps = plan(pos, window, np_pairs)
    splits = sorted({z for z, _, _ in steps})
    partials = []
    for z in splits:
        warp_state = []
        for w in range(K_WARPS):
            m, l, acc = f32(-np.inf), f32(0), np.zeros(values.shape[1], f32)
            for _, _, group in (s for s in steps if s[0] == z and s[1] == w):
                s = (keys[group] @ q).astype(f32) * f32(scale)
                m_new = max(m, s.max())
                corr = f32(np.exp(f32(m - m_new)))
                e = np.exp((s - m_new).astype(f32)).astype(f32)
                l = f32(l * corr + e.sum(dtype=f32))
                acc = (acc * corr + e @ values[group]).astype(f32)
                m = f32(m_new)
            warp_state.append((m, l, acc))
        block_max = max(st[0] for st in warp_state)
        f = [f32(np.exp(f32(st[0] - block_max))) for st in warp_state]
        partials.append((block_max, f32(sum(st[1] * fw for st, fw in zip(warp_state, f))),
                         sum(st[2] * fw for st, fw in zip(warp_state, f)).astype(f32)))
    row_max = max(p[0] for p in partials)
    f = [f32(np.exp(f32(p[0] - row_max))) for p in partials]
    total = f32(sum(p[1] * fz for p, fz in zip(partials, f)))
    return (sum(p[2] * fz for p, fz in zip(partials, f)) / total).astype(f32)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("window", [0, 1, 129, 4096])
def test_every_visible_position_is_scored_exactly_once(head_dim, window):
    np_pairs = pairs_per_lane(head_dim, head_dim)
    for pos in [0, 1, 31, 32, 63, 64, 65, 127, 128, 129, 140, 1000, 2047, 2048, 4095, 4096, 9000]:
        seen = [p for _, _, group in plan(pos, window, np_pairs) for p in group]
        assert sorted(seen) == list(range(first_visible(pos, window), pos + 1)), (pos, window)
        assert len(seen) == len(set(seen))
        # Every active split's warp 0 scores something (the kernel's block max is finite).
        for z in {z for z, _, _ in plan(pos, window, np_pairs)}:
            assert any(s[0] == z and s[1] == 0 for s in plan(pos, window, np_pairs))


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("pos,window", [(0, 0), (2, 0), (140, 0), (1000, 0), (4095, 0), (300, 129), (5000, 4096)])
def test_the_split_folds_match_the_reference(head_dim, pos, window):
    rng = np.random.default_rng(pos + head_dim)
    keys = rng.standard_normal((pos + 1, head_dim)).astype(np.float16).astype(np.float32)
    values = rng.standard_normal((pos + 1, head_dim)).astype(np.float16).astype(np.float32)
    q = (rng.standard_normal(head_dim) * 3 / np.sqrt(head_dim)).astype(np.float32)
    got = emulate(keys, values, q, pos, window, 1.0)
    first = first_visible(pos, window)
    s = keys[first:].astype(np.float64) @ q.astype(np.float64)
    w = np.exp(s - s.max())
    ref = (w / w.sum()) @ values[first:].astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-5)
