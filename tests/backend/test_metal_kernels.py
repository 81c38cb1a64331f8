"""Every metal/*.metal kernel, through the real op logic of
csrc/backend/metal/ops_encode.cpp, on the emulator under forward, reverse and
random thread orders, with AddressSanitizer and UBSan, against the CPU
backend's results (get_rows, dequantization: csrc/tensor/reference_kernels)
or NumPy float64 references of the CPU backend's formulas.

Tolerances (one table, TOLERANCES below), and why:
- get_rows, rope, kv_store, add, scale: bitwise. The kernels evaluate the
  reference's formula with the same separately rounded float32 operations
  (the emulator build disables fma contraction).
- matmul: |y - W x| <= 1e-5 * sum_i |W_oi x_i|. The dequantized weights are
  the reference's floats; only the float32 summation order differs from an
  exact sum (16-element chunks per lane, then the lanes).
- rms_norm, glu, softcap: 2e-6 relative (float32 reductions vs the CPU's
  double sum of squares; exp/tanh of the C library).
- attention: 2e-5 relative to max |V| (float32 online softmax, in a
  different order than the CPU's two-pass softmax).
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT

from kernel_cases import ALL_TYPES, block_geometry, id_of, random_matrix
from metal_emulator_harness import ORDERS, OpFailed
from muser._core import _testing as t

pytestmark = pytest.mark.metal_emulator

TOLERANCES = {"matmul": 1e-5, "rms_norm": 2e-6, "glu": 2e-6, "softcap": 2e-6, "attention": 2e-5}


def weight_row_length(qtype: GT) -> int:
    """More 16-element chunks than a simdgroup has lanes, so lanes wrap."""
    elems, _ = block_geometry(qtype)
    return 3 * 256 if elems == 256 else 576


def dequantized(qtype, raw, n_in, n_out):
    return t.dequantize_rows(id_of(qtype), raw, n_in, n_out, list(range(n_out)))


# ---- matmul


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
def test_matmul_matches_dequantized_reference(metal_emulator, qtype, order):
    rng = np.random.default_rng(int(qtype) * 7 + 1)
    n_in, n_out, n_rows = weight_row_length(qtype), 33, 5  # 33: a partial threadgroup; 5: a partial row group
    raw = random_matrix(qtype, n_in, n_out, rng)
    x = rng.standard_normal((n_rows, n_in)).astype(np.float32)
    y = metal_emulator.run("matmul", {"w": raw, "x": x},
                           {"type": qtype.name, "n_in": n_in, "n_out": n_out, "n_rows": n_rows},
                           ["y"], order=order)["y"].reshape(n_rows, n_out)
    w = dequantized(qtype, raw, n_in, n_out).astype(np.float64)
    exact = x.astype(np.float64) @ w.T
    bound = TOLERANCES["matmul"] * (np.abs(x).astype(np.float64) @ np.abs(w).T) + 1e-30
    assert np.all(np.abs(y - exact) <= bound), np.max(np.abs(y - exact) / bound)


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
def test_matmul_row_is_bitwise_the_same_alone_or_in_a_group(metal_emulator, qtype):
    rng = np.random.default_rng(int(qtype) + 100)
    n_in, n_out = weight_row_length(qtype), 9
    raw = random_matrix(qtype, n_in, n_out, rng)
    x = rng.standard_normal((4, n_in)).astype(np.float32)
    params = {"type": qtype.name, "n_in": n_in, "n_out": n_out}
    group = metal_emulator.run("matmul", {"w": raw, "x": x}, {**params, "n_rows": 4}, ["y"])["y"].reshape(4, n_out)
    for r in (0, 2):
        alone = metal_emulator.run("matmul", {"w": raw, "x": x[r:r + 1]}, {**params, "n_rows": 1}, ["y"],
                                   order="random")["y"]
        np.testing.assert_array_equal(alone, group[r])


def test_matmul_rejects_a_row_length_off_the_block_size(metal_emulator):
    rng = np.random.default_rng(0)
    raw = random_matrix(GT.Q4_0, 64, 2, rng)
    with pytest.raises(OpFailed, match=r"\[metal.matmul\] row length of Q4_0: expected a positive multiple of 32"):
        metal_emulator.run("matmul", {"w": raw, "x": np.zeros(48, np.float32)},
                           {"type": "Q4_0", "n_in": 48, "n_out": 2, "n_rows": 1}, ["y"])


def test_matmul_rejects_a_weight_buffer_too_small(metal_emulator):
    rng = np.random.default_rng(0)
    raw = random_matrix(GT.F16, 64, 2, rng)
    with pytest.raises(OpFailed, match=r"\[metal.matmul\] weight: expected at least 384 bytes"):
        metal_emulator.run("matmul", {"w": raw, "x": np.zeros(64, np.float32)},
                           {"type": "F16", "n_in": 64, "n_out": 3, "n_rows": 1}, ["y"])


# ---- get_rows


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda q: q.name)
def test_get_rows_equals_the_cpu_backend_bitwise(metal_emulator, qtype, order):
    rng = np.random.default_rng(int(qtype) + 200)
    n_in, n_rows = weight_row_length(qtype), 7
    raw = random_matrix(qtype, n_in, n_rows, rng)
    ids = np.array([6, 0, 3, 3, 6], dtype=np.int32)
    out = metal_emulator.run("get_rows", {"w": raw, "ids": ids},
                             {"type": qtype.name, "n_in": n_in, "n_table_rows": n_rows, "n_ids": len(ids)},
                             ["out"], order=order)["out"].reshape(len(ids), n_in)
    cpu = t.dequantize_rows(id_of(qtype), raw, n_in, n_rows, ids.tolist())
    np.testing.assert_array_equal(out, cpu)


# ---- rms_norm


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("n,n_groups,has_weight,in_place",
                         [(31, 1, 1, 0), (576, 1, 1, 1), (1000, 1, 1, 0), (16, 4, 1, 1), (32, 3, 0, 0)],
                         ids=["31", "576-in-place", "1000", "per-head-16", "per-head-no-weight"])
def test_rms_norm_matches_reference(metal_emulator, n, n_groups, has_weight, in_place, order):
    rng = np.random.default_rng(n * n_groups)
    x = (rng.standard_normal((3, n * n_groups)) * 3).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    inputs = {"x": x, "w": w} if has_weight else {"x": x}
    out = metal_emulator.run("rms_norm", inputs,
                             {"n": n, "n_groups": n_groups, "n_rows": 3, "eps": 1e-6, "has_weight": has_weight,
                              "in_place": in_place}, ["out"], order=order)["out"].reshape(3, n_groups, n)
    x64 = x.astype(np.float64).reshape(3, n_groups, n)
    ref = x64 / np.sqrt((x64 ** 2).mean(axis=2, keepdims=True) + 1e-6) * (w if has_weight else 1.0)
    np.testing.assert_allclose(out, ref, rtol=TOLERANCES["rms_norm"], atol=1e-7)


# ---- rope


def rope_table(positions, n_rot, base=10000.0):
    """Per row: n_rot/2 cosines then n_rot/2 sines, in double then rounded
    (what the CPU backend's RopeFrequencies computes)."""
    inv = base ** (-2.0 * np.arange(n_rot // 2) / n_rot)
    theta = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
    return np.concatenate([np.cos(theta), np.sin(theta)], axis=1).astype(np.float32)


def rope_reference(x, table, n_heads, head_dim, n_rot, neox):
    x = x.reshape(x.shape[0], n_heads, head_dim).copy()
    half = n_rot // 2
    c = table[:, None, :half]
    s = table[:, None, half:]
    if neox:
        a, b = x[:, :, :half].copy(), x[:, :, half:n_rot].copy()
        x[:, :, :half] = a * c - b * s
        x[:, :, half:n_rot] = a * s + b * c
    else:
        a, b = x[:, :, 0:n_rot:2].copy(), x[:, :, 1:n_rot:2].copy()
        x[:, :, 0:n_rot:2] = a * c - b * s
        x[:, :, 1:n_rot:2] = a * s + b * c
    return x.reshape(x.shape[0], -1)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("neox,head_dim,n_rot", [(False, 64, 64), (True, 64, 64), (True, 80, 32), (False, 128, 128)],
                         ids=["normal", "neox", "neox-partial", "normal-128"])
def test_rope_equals_reference_bitwise(metal_emulator, neox, head_dim, n_rot, order):
    rng = np.random.default_rng(head_dim + n_rot)
    n_heads, positions = 3, [0, 5, 17, 4095]
    x = rng.standard_normal((len(positions), n_heads * head_dim)).astype(np.float32)
    table = rope_table(positions, n_rot)
    out = metal_emulator.run("rope", {"x": x, "cos_sin": table},
                             {"n_rows": len(positions), "n_heads": n_heads, "head_dim": head_dim, "n_rot": n_rot,
                              "neox": int(neox)}, ["x_out"], order=order)["x_out"].reshape(x.shape)
    np.testing.assert_array_equal(out, rope_reference(x, table, n_heads, head_dim, n_rot, neox))


# ---- kv_store


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("ring_rows", [0, 6, 64])  # 64: a ring not yet grown to its full size
def test_kv_store_writes_f16_rows_at_their_positions(metal_emulator, ring_rows, order):
    rng = np.random.default_rng(ring_rows)
    width, plane_rows, start, n_rows = 40, 8, 3, 5
    src = (rng.standard_normal((n_rows, width)) * 100).astype(np.float32)
    plane = rng.standard_normal((plane_rows, width)).astype(np.float16)
    out = metal_emulator.run("kv_store", {"src": src, "plane": plane},
                             {"width": width, "n_rows": n_rows, "start": start, "ring_rows": ring_rows,
                              "plane_rows": plane_rows}, ["plane_out"], order=order,
                             dtypes={"plane_out": np.float16})["plane_out"].reshape(plane_rows, width)
    expected = plane.copy()
    for r in range(n_rows):
        p = start + r
        expected[p % ring_rows if ring_rows else p] = src[r].astype(np.float16)
    np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))


def test_kv_store_rejects_positions_past_a_growing_plane(metal_emulator):
    with pytest.raises(OpFailed, match=r"\[metal.kv_store\] positions: expected plane rows < 8, got up to row 9"):
        metal_emulator.run("kv_store", {"src": np.zeros((5, 8), np.float32), "plane": np.zeros((8, 8), np.float16)},
                           {"width": 8, "n_rows": 5, "start": 5, "ring_rows": 0, "plane_rows": 8}, ["plane_out"])


# ---- attention


def attention_reference(q, k, v, ranges, n_head, n_head_kv, dk, dv, ring_rows, scale, softcap):
    out = np.zeros((q.shape[0], n_head * dv))
    group = n_head // n_head_kv
    for r, (first, last) in enumerate(ranges):
        rows = [(p % ring_rows) if ring_rows else p for p in range(first, last + 1)]
        for h in range(n_head):
            kh = h // group
            qv = q[r, h * dk:(h + 1) * dk].astype(np.float64)
            keys = k[rows, kh * dk:(kh + 1) * dk].astype(np.float64)
            values = v[rows, kh * dv:(kh + 1) * dv].astype(np.float64)
            scores = keys @ qv * scale
            if softcap:
                scores = softcap * np.tanh(scores / softcap)
            weights = np.exp(scores - scores.max())
            out[r, h * dv:(h + 1) * dv] = weights @ values / weights.sum()
    return out


ATTENTION_CASES = {
    # name: (n_head, n_head_kv, head_dim_k, head_dim_v, plane_rows, ring_rows, softcap, ranges)
    "global": (4, 4, 64, 64, 40, 0, 0.0, [(0, 0), (0, 9), (0, 38)]),
    "gqa-window": (4, 2, 32, 32, 40, 0, 0.0, [(3, 12), (30, 39)]),
    "ring": (2, 1, 64, 64, 12, 12, 0.0, [(20, 27), (25, 31)]),
    "softcap-256": (2, 2, 256, 256, 16, 0, 50.0, [(0, 15), (4, 5)]),
    "odd-dims": (3, 1, 40, 24, 9, 0, 0.0, [(0, 8), (2, 2)]),
}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_attention_matches_reference(metal_emulator, case, order):
    n_head, n_head_kv, dk, dv, plane_rows, ring_rows, softcap, ranges = ATTENTION_CASES[case]
    rng = np.random.default_rng(len(case))
    n_rows = len(ranges)
    q = rng.standard_normal((n_rows, n_head * dk)).astype(np.float32)
    k = rng.standard_normal((plane_rows, n_head_kv * dk)).astype(np.float16)
    v = rng.standard_normal((plane_rows, n_head_kv * dv)).astype(np.float16)
    scale = 1.0 / np.sqrt(dk) * (8.0 if softcap else 1.0)  # a large scale makes the cap bite
    out = metal_emulator.run(
        "attention", {"q": q, "k": k, "v": v, "ranges": np.array(ranges, dtype=np.uint32)},
        {"n_head": n_head, "n_head_kv": n_head_kv, "head_dim_k": dk, "head_dim_v": dv, "n_rows": n_rows,
         "plane_rows": plane_rows, "ring_rows": ring_rows, "scale": repr(float(np.float32(scale))),
         "softcap": softcap}, ["out"], order=order)["out"].reshape(n_rows, n_head * dv)
    ref = attention_reference(q, k, v, ranges, n_head, n_head_kv, dk, dv, ring_rows, float(np.float32(scale)),
                              softcap)
    tol = TOLERANCES["attention"] * np.abs(v.astype(np.float64)).max()
    np.testing.assert_allclose(out, ref, rtol=0, atol=tol)


def test_attention_row_is_bitwise_the_same_alone_or_in_a_group(metal_emulator):
    rng = np.random.default_rng(5)
    n_head, dk, plane_rows = 2, 64, 30
    ranges = [(0, 29), (3, 17), (10, 10)]
    q = rng.standard_normal((3, n_head * dk)).astype(np.float32)
    k = rng.standard_normal((plane_rows, dk)).astype(np.float16)
    v = rng.standard_normal((plane_rows, dk)).astype(np.float16)
    params = {"n_head": n_head, "n_head_kv": 1, "head_dim_k": dk, "head_dim_v": dk, "plane_rows": plane_rows,
              "ring_rows": 0, "scale": 0.125, "softcap": 0.0}
    group = metal_emulator.run("attention", {"q": q, "k": k, "v": v, "ranges": np.array(ranges, np.uint32)},
                               {**params, "n_rows": 3}, ["out"])["out"].reshape(3, -1)
    alone = metal_emulator.run("attention", {"q": q[1:2], "k": k, "v": v, "ranges": np.array(ranges[1:2], np.uint32)},
                               {**params, "n_rows": 1}, ["out"], order="reverse")["out"]
    np.testing.assert_array_equal(alone, group[1])


# ---- element-wise


def swiglu_reference(g, u):
    g = g.astype(np.float64)
    return g / (1 + np.exp(-g)) * u


def geglu_reference(g, u):
    g = g.astype(np.float64)
    return g / (1 + np.exp(-1.5957691216057308 * g * (1 + 0.044715 * g * g))) * u


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("op", ["swiglu", "geglu"])
def test_glu_matches_reference(metal_emulator, op, order):
    rng = np.random.default_rng(3)
    n, n_rows = 300, 3  # 300: two threadgroups per row, the second partial
    gate = (rng.standard_normal((n_rows, n)) * 4).astype(np.float32)
    up = rng.standard_normal((n_rows, n)).astype(np.float32)
    out = metal_emulator.run(op, {"gate": gate, "up": up}, {"n": n, "n_rows": n_rows}, ["out"],
                             order=order)["out"].reshape(n_rows, n)
    ref = (swiglu_reference if op == "swiglu" else geglu_reference)(gate, up)
    np.testing.assert_allclose(out, ref, rtol=TOLERANCES["glu"], atol=1e-7)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("broadcast", [0, 1])
def test_add_is_exact(metal_emulator, broadcast, order):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 100)).astype(np.float32)
    b = rng.standard_normal((1 if broadcast else 3, 100)).astype(np.float32)
    out = metal_emulator.run("add", {"a": a, "b": b}, {"n": 100, "n_rows": 3, "broadcast": broadcast}, ["out"],
                             order=order)["out"].reshape(3, 100)
    np.testing.assert_array_equal(out, a + b)


@pytest.mark.parametrize("order", ORDERS)
def test_scale_is_exact(metal_emulator, order):
    x = np.random.default_rng(5).standard_normal((2, 576)).astype(np.float32)
    out = metal_emulator.run("scale", {"x": x}, {"n": 576, "n_rows": 2, "value": 24.0}, ["out"], order=order)["out"]
    np.testing.assert_array_equal(out.reshape(2, 576), x * np.float32(24.0))


@pytest.mark.parametrize("order", ORDERS)
def test_softcap_matches_reference(metal_emulator, order):
    x = (np.random.default_rng(6).standard_normal((2, 500)) * 60).astype(np.float32)
    out = metal_emulator.run("softcap", {"x": x}, {"n": 500, "n_rows": 2, "value": 30.0}, ["out"], order=order)["out"]
    np.testing.assert_allclose(out.reshape(2, 500), 30.0 * np.tanh(x.astype(np.float64) / 30.0),
                               rtol=TOLERANCES["softcap"], atol=1e-6)


@pytest.mark.parametrize("order", ORDERS)
def test_copy_cols_takes_a_column_slice(metal_emulator, order):
    x = np.random.default_rng(7).standard_normal((3, 96)).astype(np.float32)
    out = metal_emulator.run("copy_cols", {"x": x}, {"n": 40, "n_rows": 3, "cols": 96, "offset": 32}, ["out"],
                             order=order)["out"]
    np.testing.assert_array_equal(out.reshape(3, 40), x[:, 32:72])


def test_softcap_rejects_a_non_positive_cap(metal_emulator):
    with pytest.raises(OpFailed, match=r"\[metal.softcap\] cap: expected > 0"):
        metal_emulator.run("softcap", {"x": np.zeros(4, np.float32)}, {"n": 4, "n_rows": 1, "value": 0.0}, ["out"])
