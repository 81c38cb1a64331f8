"""The summation order of the CUDA tensor-core GEMM (csrc/backend/cuda/ops_gemm_mma.cu),
emulated on the host in float32 against the matvec kernel's (ops_matvec.cu): runs
without a GPU, so the claim the GEMM's exactness rests on is checked here;
tests/cuda/test_cuda_ops.py checks the kernels themselves bitwise.

The matvec: lane l sums the terms of units l, l+32, ... in order from 0.0f, then
warp_sum adds lanes with xor offsets 16, 8, 4, 2, 1. The GEMM: classes i = 0..31
(lane bitrev5(i)), each summed the same way, pushed as leaf i onto a 5-level
pairwise stack that merges as many levels as i has trailing ones; the walk goes
in stages of K_STAGE_UNITS slots, J = ceil(n_units / 32) steps per class padded
to 1, 2, 4 or a multiple of 8 (Walk<kP>), padding steps adding +0.0f. Also the
int -> float conversion through the 1.5 * 2^23 magic bits the GEMM uses instead
of I2F.
"""

from __future__ import annotations

import numpy as np
import pytest

K_STAGE_UNITS = 8
MAGIC_BITS = 0x4B400000
MAGIC = np.float32(12582912.0)
F32 = np.float32


def bitrev5(i: int) -> int:
    return int(f"{i:05b}"[::-1], 2)


def matvec_order(terms: np.ndarray) -> np.float32:
    """lane partials, then the xor butterfly of warp_sum, as lane 0 ends it."""
    n_units = len(terms)
    lanes = [F32(0.0)] * 32
    for lane in range(32):
        acc = F32(0.0)
        for u in range(lane, n_units, 32):
            acc = F32(acc + terms[u])
        lanes[lane] = acc
    for offset in (16, 8, 4, 2, 1):
        lanes = [F32(lanes[lane] + lanes[lane ^ offset]) for lane in range(32)]
    return lanes[0]


def walk_shape(n_units: int) -> tuple[int, int]:
    """(kP, stages per class) as launch_gemm picks them."""
    per_class = (n_units + 31) // 32
    if per_class <= 4:
        return (1 if per_class <= 1 else 2 if per_class <= 2 else 4), 1
    return 8, (per_class + 7) // 8


def walk_unit(k_p: int, stages_per_class: int, stage: int, slot: int) -> tuple[int, int]:
    """(class, unit) of a stage's slot, Walk<kP>::unit."""
    if k_p < 8:
        cls = stage * (K_STAGE_UNITS // k_p) + slot // k_p
        return cls, bitrev5(cls) + 32 * (slot % k_p)
    cls = stage // stages_per_class
    return cls, bitrev5(cls) + 32 * ((stage % stages_per_class) * K_STAGE_UNITS + slot)


def gemm_order(terms: np.ndarray) -> np.float32:
    """The GEMM's walk: stages of slots in class order, +0.0f for the padding
    steps (units past n_units), the pairwise stack at each class's end."""
    n_units = len(terms)
    k_p, spc = walk_shape(n_units)
    n_stages = 32 * k_p // K_STAGE_UNITS if k_p < 8 else 32 * spc
    steps_per_class = k_p if k_p < 8 else K_STAGE_UNITS * spc
    acc = F32(0.0)
    stack = [F32(0.0)] * 5
    seen = []
    for stage in range(n_stages):
        for slot in range(K_STAGE_UNITS):
            cls, u = walk_unit(k_p, spc, stage, slot)
            seen.append(u)
            acc = F32(acc + (terms[u] if u < n_units else F32(0.0)))
            if (stage * K_STAGE_UNITS + slot) % steps_per_class == steps_per_class - 1:  # cls ends
                level = (~cls & -~cls).bit_length() - 1  # trailing ones of cls
                v = acc
                for lv in range(level):
                    v = F32(stack[lv] + v)
                if level < 5:
                    stack[level] = v
                    acc = F32(0.0)
                else:
                    acc = v
                assert cls == (stage * K_STAGE_UNITS + slot) // steps_per_class
    # Every unit once, in class order, each class's units increasing.
    real = [u for u in seen if u < n_units]
    assert sorted(real) == list(range(n_units))
    assert real == sorted(real, key=lambda u: (bitrev5(u % 32), u))
    return acc


def random_terms(rng: np.random.Generator, n_units: int) -> np.ndarray:
    # Wide magnitudes and both signs so that the order shows in the low bits;
    # some exact zeros and negative zeros (0.0f + -0.0f is +0.0f).
    terms = (rng.standard_normal(n_units) * np.exp2(rng.integers(-12, 12, n_units))).astype(np.float32)
    terms[rng.random(n_units) < 0.05] = F32(-0.0)
    terms[rng.random(n_units) < 0.05] = F32(0.0)
    return terms


@pytest.mark.parametrize("n_units", [1, 2, 5, 16, 18, 31, 32, 33, 48, 64, 96, 100, 128, 160, 181, 256, 288, 448])
def test_the_gemm_walk_adds_like_the_matvec_lanes_and_butterfly(n_units):
    rng = np.random.default_rng(n_units)
    for _ in range(20):
        terms = random_terms(rng, n_units)
        got, want = gemm_order(terms), matvec_order(terms)
        assert got.tobytes() == want.tobytes(), (n_units, got, want)


def test_a_plain_left_to_right_sum_would_differ():
    # The check above can tell orders apart: sequential accumulation over the
    # units (what a naive GEMM does) gives other bits for most rows.
    rng = np.random.default_rng(7)
    differ = 0
    for _ in range(20):
        terms = random_terms(rng, 128)
        seq = F32(0.0)
        for v in terms:
            seq = F32(seq + v)
        differ += seq.tobytes() != matvec_order(terms).tobytes()
    assert differ >= 10


def test_all_negative_zero_terms_give_the_same_zero():
    for n_units in (1, 33, 64):
        terms = np.full(n_units, -0.0, dtype=np.float32)
        assert gemm_order(terms).tobytes() == matvec_order(terms).tobytes()


def test_the_magic_conversion_is_static_cast_float_over_the_block_sum_range():
    # |block sum| < 32 * 128 * 128 = 2^19 for every type with a GEMM; the trick
    # holds on (-2^22, 2^22).
    sums = np.concatenate([np.arange(-(1 << 16), 1 << 16), np.arange(-(1 << 22) + 1, 1 << 22, 997),
                           np.array([(1 << 22) - 1, -(1 << 22) + 1, 0])]).astype(np.int32)
    bits = (np.int64(MAGIC_BITS) + sums.astype(np.int64)).astype(np.int32)
    converted = bits.view(np.float32) - MAGIC
    assert np.array_equal(converted.view(np.int32), sums.astype(np.float32).view(np.int32))
