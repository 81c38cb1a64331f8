"""Item 2: a GGUF is refused with ModelFormatError when its tensors overlap or
when the memory it implies exceeds what the machine has, naming the limit,
before anything large is allocated."""

from __future__ import annotations

import struct
import time

import pytest

import muser
from muser import _core
from tests.fixtures.gguf_bytes import STRING, U32, F32 as F32_TAG, GgufBytes, Tensor, valid_file

GGML_F32 = 0


def _write(tmp_path, data: bytes, name: str = "model.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_overlapping_tensors_are_refused_naming_both(tmp_path):
    f = valid_file()
    f.tensors[1].offset = 0  # "weight.f16" claims the bytes of "weight.f32"
    with pytest.raises(muser.ModelFormatError, match=r"weight\.f16.*overlaps.*weight\.f32|weight\.f32.*weight\.f16"):
        _core.GgufFile.open(_write(tmp_path, f.build()))


def test_adjacent_tensors_are_fine(tmp_path):
    assert len(_core.GgufFile.open(_write(tmp_path, valid_file().build())).tensor_infos()) == 3


def aliasing_bomb() -> bytes:
    """The campaign's file: 4.4 MB on disk, every norm vector of 4096 layers
    at offset 0, embedding_length 2^20 (about 33 GB of float32 copies)."""
    n_embd, n_layer = 1 << 20, 4096
    f = (GgufBytes()
         .add("general.architecture", STRING, "llama")
         .add("llama.embedding_length", U32, n_embd)
         .add("llama.block_count", U32, n_layer)
         .add("llama.feed_forward_length", U32, 16)
         .add("llama.context_length", U32, 64)
         .add("llama.attention.head_count", U32, 1)
         .add("llama.vocab_size", U32, 4)
         .add("llama.attention.layer_norm_rms_epsilon", F32_TAG, 1e-5))
    one_vector = struct.pack("<f", 1.0) * n_embd
    f.tensors.append(Tensor("output_norm.weight", [n_embd], GGML_F32, one_vector))
    for layer in range(n_layer):
        for role in ("attn_norm", "ffn_norm"):
            f.tensors.append(Tensor(f"blk.{layer}.{role}.weight", [n_embd], GGML_F32, b"", offset=0))
    return f.build()


def test_the_aliasing_bomb_is_refused_quickly_without_allocating(tmp_path):
    path = _write(tmp_path, aliasing_bomb())
    started = time.perf_counter()
    with pytest.raises(muser.ModelFormatError, match="overlaps"):
        muser.Engine(path, backend="cpu", threads=1)
    assert time.perf_counter() - started < 10


def test_a_model_larger_than_the_memory_limit_is_refused_naming_the_limit(tiny_model, monkeypatch):
    path = tiny_model("llama", tokenizer="gpt2")
    monkeypatch.setenv("MUSER_MAX_MODEL_BYTES", "4096")
    with pytest.raises(muser.ModelFormatError, match="MUSER_MAX_MODEL_BYTES"):
        muser.Engine(path, backend="null", threads=1)
    monkeypatch.setenv("MUSER_MAX_MODEL_BYTES", str(1 << 40))
    assert muser.Engine(path, backend="null", threads=1).n_vocab > 0


def test_a_malformed_memory_limit_is_refused(tiny_model, monkeypatch):
    monkeypatch.setenv("MUSER_MAX_MODEL_BYTES", "lots")
    with pytest.raises(ValueError, match="MUSER_MAX_MODEL_BYTES"):
        muser.Engine(tiny_model("llama", tokenizer="gpt2"), backend="null", threads=1)
