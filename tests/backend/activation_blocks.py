"""NumPy statement of the activation formats (the specification the C++
quantizers are tested against) and a decoder for their bytes."""

from __future__ import annotations

import numpy as np

Q8_0 = np.dtype([("d", "<f2"), ("qs", "i1", 32)])
Q8_1 = np.dtype([("d", "<f2"), ("s", "<f2"), ("qs", "i1", 32)])
Q8_K = np.dtype([("d", "<f4"), ("qs", "i1", 256), ("bsums", "<i2", 16)])
FORMATS = {"Q8_0": Q8_0, "Q8_1": Q8_1, "Q8_K": Q8_K}


def quantize_q8_0(x: np.ndarray, with_sum: bool = False) -> np.ndarray:
    """d = amax/127 (fp16), q = round_half_even(x * 127/amax)."""
    xb = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(xb).max(axis=1)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(xb * inv[:, None]), -127, 127).astype(np.int8)
    out = np.zeros(len(xb), dtype=Q8_1 if with_sum else Q8_0)
    out["d"] = d.astype(np.float16)
    out["qs"] = q
    if with_sum:
        out["s"] = (d * q.astype(np.int32).sum(axis=1).astype(np.float32)).astype(np.float16)
    return out


def quantize_q8_k(x: np.ndarray) -> np.ndarray:
    """The element of largest magnitude maps to -127; d = 1/scale (fp32)."""
    xb = x.astype(np.float32).reshape(-1, 256)
    out = np.zeros(len(xb), dtype=Q8_K)
    for i, block in enumerate(xb):
        extreme = block[np.argmax(np.abs(block))]
        if extreme == 0:
            continue
        iscale = np.float32(-127) / extreme
        q = np.clip(np.rint(iscale * block), -127, 127).astype(np.int8)
        out[i]["qs"] = q
        out[i]["bsums"] = q.astype(np.int32).reshape(16, 16).sum(axis=1)
        out[i]["d"] = np.float32(1) / iscale
    return out


def decode(fmt: str, raw: np.ndarray) -> np.ndarray:
    """Structured view of raw activation bytes."""
    return raw.view(FORMATS[fmt])


def dequantize(fmt: str, raw: np.ndarray) -> np.ndarray:
    """Float64 values d * q of the activation row."""
    blocks = decode(fmt, raw)
    return (blocks["d"].astype(np.float64)[:, None] * blocks["qs"].astype(np.float64)).reshape(-1)
