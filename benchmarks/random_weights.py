"""Random valid weight tensors in ggml's formats, shared by muser's kernel
benchmark and its ggml peer (numpy only, so both interpreters import it).

Quant bytes are uniformly random; the fp16 scale/min fields are replaced by
modest finite values so no block overflows."""

from __future__ import annotations

import numpy as np

# name: (ggml type id, elements per block, bytes per block)
TYPES = {
    "F32": (0, 1, 4), "F16": (1, 1, 2), "BF16": (30, 1, 2),
    "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24),
    "Q8_0": (8, 32, 34), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110), "Q4_K": (12, 256, 144),
    "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210),
}
# Byte offsets of each block's fp16 scale / min fields.
SCALE_OFFSETS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
}


def random_weight(name: str, n_in: int, n_out: int, seed: int = 0) -> np.ndarray:
    """Raw bytes (uint8) of a (n_out, n_in) tensor of type `name`."""
    rng = np.random.default_rng(seed)
    _, elems, nbytes = TYPES[name]
    n = n_in * n_out
    if name == "F32":
        return rng.standard_normal(n).astype(np.float32).view(np.uint8)
    if name == "F16":
        return rng.standard_normal(n).astype(np.float16).view(np.uint8)
    if name == "BF16":
        return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    blocks = rng.integers(0, 256, size=(n // elems, nbytes), dtype=np.uint8)
    for off in SCALE_OFFSETS[name]:
        blocks[:, off:off + 2] = rng.uniform(-0.05, 0.05, (len(blocks), 1)).astype(np.float16).view(np.uint8)
    return blocks.reshape(-1)


def random_activations(rows: int, n_in: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, n_in)).astype(np.float32)
