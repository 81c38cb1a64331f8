"""Shared inputs for the CPU kernel tests: valid random blocks per type and the
one table of tolerances.

Random blocks are random bytes with the fp16 scale fields replaced by sane
values (finite, modest magnitude), so every bit pattern of the quants is
exercised without overflow. Where the `gguf` package can quantize a type we
also use real quantized data.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as GT
from gguf.constants import GGML_QUANT_SIZES

ALL_TYPES = [
    GT.F32, GT.F16, GT.BF16, GT.Q4_0, GT.Q4_1, GT.Q5_0, GT.Q5_1, GT.Q8_0,
    GT.Q2_K, GT.Q3_K, GT.Q4_K, GT.Q5_K, GT.Q6_K,
]
QUANTIZED_TYPES = [t for t in ALL_TYPES if t not in (GT.F32, GT.F16, GT.BF16)]
# Types gguf.quants can quantize (the K-quants it only dequantizes).
GGUF_QUANTIZABLE = [GT.F32, GT.F16, GT.BF16, GT.Q4_0, GT.Q4_1, GT.Q5_0, GT.Q5_1, GT.Q8_0]

# Byte offsets of the fp16 fields in each block: (offset, role). "scale"
# fields multiply the quants; "min" fields are subtracted (K-quants) or added
# (Q4_1/Q5_1).
FP16_FIELDS = {
    GT.Q4_0: [(0, "scale")],
    GT.Q4_1: [(0, "scale"), (2, "min")],
    GT.Q5_0: [(0, "scale")],
    GT.Q5_1: [(0, "scale"), (2, "min")],
    GT.Q8_0: [(0, "scale")],
    GT.Q2_K: [(80, "scale"), (82, "min")],
    GT.Q3_K: [(108, "scale")],
    GT.Q4_K: [(0, "scale"), (2, "min")],
    GT.Q5_K: [(0, "scale"), (2, "min")],
    GT.Q6_K: [(208, "scale")],
}

# The one tolerance table, per weight type: (dequantize_atol, dot_rtol).
#  - dequantize: scalar reference vs gguf.quants.dequantize. Both evaluate the
#    same float32 formula, so we require bitwise equality (atol 0).
#  - dot_rtol: SIMD vs scalar vec_dot, relative to sum(|w_i * x_i|) (the
#    scale of the rounding error of any summation order). The integer parts
#    are exact; only float accumulation order differs.
TOLERANCES: dict[GT, tuple[float, float]] = {t: (0.0, 2e-6) for t in ALL_TYPES}
# Float weights sum n float products in a different order: error grows ~ n eps.
for _t in (GT.F32, GT.F16, GT.BF16):
    TOLERANCES[_t] = (0.0, 1e-5)


def block_geometry(qtype: GT) -> tuple[int, int]:
    """(elements per block, bytes per block)."""
    return GGML_QUANT_SIZES[qtype]


def random_row(qtype: GT, n: int, rng: np.random.Generator) -> np.ndarray:
    """Raw bytes (uint8) of one valid row of `n` elements of `qtype`."""
    elems, nbytes = block_geometry(qtype)
    assert n % elems == 0
    if qtype == GT.F32:
        return rng.standard_normal(n).astype(np.float32).view(np.uint8)
    if qtype == GT.F16:
        return rng.standard_normal(n).astype(np.float16).view(np.uint8)
    if qtype == GT.BF16:
        bits = rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16
        return bits.astype(np.uint16).view(np.uint8)
    n_blocks = n // elems
    blocks = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
    for offset, role in FP16_FIELDS[qtype]:
        if role == "scale":
            values = rng.uniform(-0.05, 0.05, n_blocks)
        else:
            values = rng.uniform(-0.02, 0.02, n_blocks)
        blocks[:, offset:offset + 2] = values.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(-1)


def random_matrix(qtype: GT, n_in: int, n_out: int, rng: np.random.Generator) -> np.ndarray:
    """Raw bytes of a (n_out, n_in) weight, rows back to back."""
    return np.concatenate([random_row(qtype, n_in, rng) for _ in range(n_out)])


def row_lengths(qtype: GT) -> list[int]:
    """1, 2, 3 blocks and a non-trivial multiple of the block size."""
    elems, _ = block_geometry(qtype)
    if elems == 1:
        return [1, 2, 3, 31, 32, 33, 576]
    return [elems, 2 * elems, 3 * elems, 18 * elems if elems == 32 else 6 * elems]


def id_of(qtype: GT) -> int:
    return int(qtype)
