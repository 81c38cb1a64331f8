"""The tiny GGUF model behind :func:`muser.testing.null_engine`, written by hand.

The null backend never reads weights, but the engine still maps and validates
a real file (architecture, hyperparameters, tensor table, tokenizer), so the
model is a complete, valid one-layer llama with zero weights and a small
SentencePiece vocabulary: control tokens, ChatML markers, the 256 byte
tokens, the space marker, letters and digits (text tokenizes to about one
token per character). It has a ChatML chat template, so ``muser.chat`` works.

Written with a few lines of ``struct`` instead of the ``gguf`` package, so
``muser.testing`` needs nothing beyond muser's own dependencies.
"""

from __future__ import annotations

from typing import Any

import hashlib
import os
import struct
import tempfile
from pathlib import Path

__all__ = ["NULL_MODEL_CONTEXT", "null_model_bytes", "null_model_path"]

NULL_MODEL_CONTEXT = 16384
"""The null model's training context (the most a session of it can hold)."""

# GGUF value type tags and token types (the GGUF specification).
_U32, _I32, _F32, _BOOL, _STRING, _ARRAY = 4, 5, 6, 7, 8, 9
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6
_GGML_F32 = 0
_ALIGNMENT = 32

_N_EMBD, _N_HEAD, _N_FF, _N_LAYER = 64, 2, 64, 1

_CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(tag: int, value: Any) -> bytes:
    if tag == _STRING:
        return _string(value)
    if tag == _ARRAY:
        elem_tag, items = value
        return struct.pack("<IQ", elem_tag, len(items)) + b"".join(_value(elem_tag, v) for v in items)
    return struct.pack({_U32: "<I", _I32: "<i", _F32: "<f", _BOOL: "<?"}[tag], value)


def _vocabulary() -> tuple[list[str], list[float], list[int]]:
    specials = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)] + pieces
    scores = [0.0] * (len(specials) + 256) + [-float(rank) for rank in range(len(pieces))]
    types = [_UNKNOWN, _CONTROL, _CONTROL, _CONTROL, _CONTROL] + [_BYTE] * 256 + [_NORMAL] * len(pieces)
    return tokens, scores, types


def null_model_bytes() -> bytes:
    """The complete GGUF v3 file (deterministic: the same bytes every call)."""
    tokens, scores, types = _vocabulary()
    n_vocab, head_dim = len(tokens), _N_EMBD // _N_HEAD
    kv: list[tuple[str, int, object]] = [
        ("general.architecture", _STRING, "llama"),
        ("general.name", _STRING, "muser-testing-null"),
        ("llama.vocab_size", _U32, n_vocab),
        ("llama.context_length", _U32, NULL_MODEL_CONTEXT),
        ("llama.embedding_length", _U32, _N_EMBD),
        ("llama.block_count", _U32, _N_LAYER),
        ("llama.feed_forward_length", _U32, _N_FF),
        ("llama.attention.head_count", _U32, _N_HEAD),
        ("llama.attention.head_count_kv", _U32, _N_HEAD),
        ("llama.attention.layer_norm_rms_epsilon", _F32, 1e-5),
        ("llama.rope.freq_base", _F32, 10000.0),
        ("llama.rope.dimension_count", _U32, head_dim),
        ("tokenizer.ggml.model", _STRING, "llama"),
        ("tokenizer.ggml.pre", _STRING, "default"),
        ("tokenizer.ggml.tokens", _ARRAY, (_STRING, tokens)),
        ("tokenizer.ggml.scores", _ARRAY, (_F32, scores)),
        ("tokenizer.ggml.token_type", _ARRAY, (_I32, types)),
        ("tokenizer.ggml.unknown_token_id", _U32, 0),
        ("tokenizer.ggml.bos_token_id", _U32, 1),
        ("tokenizer.ggml.eos_token_id", _U32, 2),
        ("tokenizer.ggml.eot_token_id", _U32, 4),
        ("tokenizer.ggml.add_bos_token", _BOOL, True),
        ("tokenizer.ggml.add_eos_token", _BOOL, False),
        ("tokenizer.ggml.add_space_prefix", _BOOL, False),
        ("tokenizer.chat_template", _STRING, _CHATML),
    ]
    e, f = _N_EMBD, _N_FF
    # (name, dims as GGUF writes them: fastest-varying first)
    tensors = [("token_embd.weight", [e, n_vocab]), ("output_norm.weight", [e]), ("output.weight", [e, n_vocab])]
    for layer in range(_N_LAYER):
        blk = f"blk.{layer}."
        tensors += [
            (blk + "attn_norm.weight", [e]), (blk + "attn_q.weight", [e, e]), (blk + "attn_k.weight", [e, e]),
            (blk + "attn_v.weight", [e, e]), (blk + "attn_output.weight", [e, e]), (blk + "ffn_norm.weight", [e]),
            (blk + "ffn_gate.weight", [e, f]), (blk + "ffn_up.weight", [e, f]), (blk + "ffn_down.weight", [f, e]),
        ]
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, tag, value in kv:
        out += _string(key) + struct.pack("<I", tag) + _value(tag, value)
    offset, sizes = 0, []
    for name, dims in tensors:
        size = 4
        for d in dims:
            size *= d
        out += _string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", _GGML_F32, offset)
        sizes.append(size)
        offset += -(-size // _ALIGNMENT) * _ALIGNMENT
    out += bytes(-len(out) % _ALIGNMENT)
    for size in sizes:  # zero weights: the null backend never reads them
        out += bytes(-(-size // _ALIGNMENT) * _ALIGNMENT)
    return bytes(out)


def null_model_path(directory: str | os.PathLike[str] | None = None) -> Path:
    """Write the null model (once) and return its path.

    The file is named after a hash of its bytes and appears atomically, so
    concurrent test processes share it safely. ``directory`` defaults to the
    system temporary directory.
    """
    data = null_model_bytes()
    folder = Path(directory) if directory is not None else Path(tempfile.gettempdir())
    path = folder / f"muser-null-{hashlib.sha256(data).hexdigest()[:16]}.gguf"
    if path.exists() and path.stat().st_size == len(data):
        return path
    folder.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=folder, prefix=path.name, suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise
    return path
