"""Llama-architecture GGUFs with real model shapes and random weights, for
CPU-vs-CUDA parity and speed on the GPU machine.

Weights are random quantized blocks; the block scales are chosen so that the
residual stream keeps a modest scale through the layers and the output
projection spreads the logits (standard deviation about 8), which makes
top-1/top-2 gaps of 1 or more common, as the parity criterion needs.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

SHAPES = {
    "smollm2-135m": dict(vocab=49152, d=576, ff=1536, layers=30, heads=9, kv=3),
    "llama-1b": dict(vocab=128256, d=2048, ff=8192, layers=16, heads=32, kv=8),
    "llama3-8b": dict(vocab=128256, d=4096, ff=14336, layers=32, heads=32, kv=8),
    # llama3-8b's layer shapes in a small file (tests of per-layer kernels).
    "llama3-8b-2layers": dict(vocab=32000, d=4096, ff=14336, layers=2, heads=32, kv=8),
}
# (elements per block, bytes per block, [(offset of an fp16 scale, kind)]);
# kind "d" multiplies the quants, "m" is a minimum.
LAYOUT = {
    "Q4_0": (32, 18, [(0, "d")]),
    "Q4_1": (32, 20, [(0, "d"), (2, "m")]),
    "Q5_0": (32, 22, [(0, "d")]),
    "Q8_0": (32, 34, [(0, "d")]),
    "Q4_K": (256, 144, [(0, "d"), (2, "m")]),
    "Q5_K": (256, 176, [(0, "d"), (2, "m")]),
    "Q6_K": (256, 210, [(208, "d")]),
}
# Typical |weight| per unit of the fp16 d field for random quant bytes
# (the standard deviation of the dequantized values when d = 1).
_SPREAD = {"Q4_0": 4.6, "Q4_1": 4.6, "Q5_0": 9.2, "Q8_0": 74.0, "Q4_K": 4.6 * 31, "Q5_K": 9.2 * 31, "Q6_K": 18.5 * 64}


def _matrix(rng: np.random.Generator, qtype: str, rows: int, cols: int, std: float) -> np.ndarray:
    per, nbytes, fields = LAYOUT[qtype]
    nb = rows * cols // per
    blocks = rng.integers(0, 256, size=(nb, nbytes), dtype=np.uint8)
    if qtype == "Q6_K":  # signed 8-bit sub-block scales: keep them positive and modest
        blocks[:, 192:208] = rng.integers(16, 48, size=(nb, 16), dtype=np.uint8)
    d = std / _SPREAD[qtype]
    for offset, kind in fields:
        value = d if kind == "d" else d * 2.0
        blocks[:, offset:offset + 2] = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)
    return blocks.reshape(rows, cols // per * nbytes)


def write_real_shape(path: str | os.PathLike[str], shape: str, qtype: str, seed: int = 0,
                     logit_std: float = 8.0) -> Path:
    """Write the model once (skipped when `path` exists); returns the path."""
    path = Path(path)
    if path.exists():
        return path
    s = SHAPES[shape]
    d, ff, n_layer, heads, kv, vocab = s["d"], s["ff"], s["layers"], s["heads"], s["kv"], s["vocab"]
    hd = d // heads
    rng = np.random.default_rng(seed)
    partial = path.with_name(path.name + ".partial")
    w = GGUFWriter(partial, "llama")
    w.add_context_length(8192)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_block_count(n_layer)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)
    toks = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    toks += [f"t{i}".encode() for i in range(vocab - len(toks))]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (vocab - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    q = GGMLQuantizationType[qtype]
    # Embedding rows of unit scale; every block adds O(0.3) to the residual
    # so later layers still matter; the output spreads the logits.
    w.add_tensor("token_embd.weight", _matrix(rng, qtype, vocab, d, 1.0), raw_dtype=q)
    proj = 0.3 / np.sqrt(d)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", _matrix(rng, qtype, d, d, 1.0 / np.sqrt(d)), raw_dtype=q)
        w.add_tensor(p + "attn_k.weight", _matrix(rng, qtype, kv * hd, d, 1.0 / np.sqrt(d)), raw_dtype=q)
        w.add_tensor(p + "attn_v.weight", _matrix(rng, qtype, kv * hd, d, 1.0 / np.sqrt(d)), raw_dtype=q)
        w.add_tensor(p + "attn_output.weight", _matrix(rng, qtype, d, d, proj), raw_dtype=q)
        w.add_tensor(p + "ffn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", _matrix(rng, qtype, ff, d, 1.0 / np.sqrt(d)), raw_dtype=q)
        w.add_tensor(p + "ffn_up.weight", _matrix(rng, qtype, ff, d, 1.0 / np.sqrt(d)), raw_dtype=q)
        w.add_tensor(p + "ffn_down.weight", _matrix(rng, qtype, d, ff, 0.3 / np.sqrt(ff)), raw_dtype=q)
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    w.add_tensor("output.weight", _matrix(rng, qtype, vocab, d, logit_std / np.sqrt(d)), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(partial, path)
    return path
