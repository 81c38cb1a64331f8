"""The tiny synthetic GGUF files carry llama.cpp's names, shapes, types and keys.

The expectations here are written out independently of the writer, from
llama.cpp's loaders (``src/models/<arch>.cpp``, ``src/llama-arch.cpp``).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf.quants import dequantize

from tests.fixtures.tiny_models import (
    ARCHITECTURES,
    K_QUANT_TYPES,
    N_VOCAB,
    WEIGHT_TYPES,
    gpt2_byte_to_unicode,
    tiny_model_spec,
    write_tiny_model,
)


def _fields(reader: GGUFReader) -> dict:
    out = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        if field.types[0] == GGUFValueType.ARRAY:
            out[name] = list(field.contents())
        else:
            out[name] = field.contents()
    return out


def _shapes(reader: GGUFReader) -> dict[str, tuple[int, ...]]:
    return {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}


def _expected_shapes(arch: str, n_layer: int, e: int, q: int, kv: int, d: int, f: int, tied: bool) -> dict:
    """llama.cpp's tensor table for one architecture, as ggml ne (row length first)."""
    shapes = {"token_embd.weight": (e, N_VOCAB), "output_norm.weight": (e,)}
    if not tied:
        shapes["output.weight"] = (e, N_VOCAB)
    for il in range(n_layer):
        b = f"blk.{il}."
        shapes.update({
            b + "attn_norm.weight": (e,),
            b + "attn_q.weight": (e, q),
            b + "attn_k.weight": (e, kv),
            b + "attn_v.weight": (e, kv),
            b + "attn_output.weight": (q, e),
            b + "ffn_norm.weight": (e,),
            b + "ffn_gate.weight": (e, f),
            b + "ffn_up.weight": (e, f),
            b + "ffn_down.weight": (f, e),
        })
        if arch == "qwen2":
            shapes.update({b + "attn_q.bias": (q,), b + "attn_k.bias": (kv,), b + "attn_v.bias": (kv,)})
        if arch in ("qwen3", "gemma3"):
            shapes.update({b + "attn_q_norm.weight": (d,), b + "attn_k_norm.weight": (d,)})
        if arch == "gemma3":
            shapes.update({b + "post_attention_norm.weight": (e,), b + "post_ffw_norm.weight": (e,)})
    return shapes


@pytest.mark.parametrize(
    "arch, n_layer, head_dim, tied",
    [("llama", 2, 16, True), ("qwen2", 2, 16, False), ("qwen3", 2, 32, False), ("gemma3", 6, 32, True)],
)
def test_default_model_has_llama_cpp_tensor_names_and_shapes(tmp_path, arch, n_layer, head_dim, tied):
    path = write_tiny_model(tmp_path / "m.gguf", arch=arch)
    expected = _expected_shapes(arch, n_layer, 64, 4 * head_dim, 2 * head_dim, head_dim, 128, tied)
    assert _shapes(GGUFReader(path)) == expected


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_default_model_declares_llama_cpp_hyperparameter_keys(tmp_path, arch):
    fields = _fields(GGUFReader(write_tiny_model(tmp_path / "m.gguf", arch=arch)))
    wide = arch in ("qwen3", "gemma3")
    expected = {
        "general.architecture": arch,
        f"{arch}.block_count": 6 if arch == "gemma3" else 2,
        f"{arch}.context_length": 256,
        f"{arch}.embedding_length": 64,
        f"{arch}.feed_forward_length": 128,
        f"{arch}.attention.head_count": 4,
        f"{arch}.attention.head_count_kv": 2,
        f"{arch}.rope.dimension_count": 32 if wide else 16,
        f"{arch}.rope.freq_base": 10000.0 if arch == "llama" else 1e6,
        f"{arch}.vocab_size": N_VOCAB,
    }
    if wide:
        expected[f"{arch}.attention.key_length"] = 32
        expected[f"{arch}.attention.value_length"] = 32
    if arch == "gemma3":
        expected[f"{arch}.attention.sliding_window"] = 16
    for key, value in expected.items():
        assert fields[key] == pytest.approx(value), key
    eps = fields[f"{arch}.attention.layer_norm_rms_epsilon"]
    assert eps == pytest.approx(1e-5 if arch == "llama" else 1e-6, rel=1e-6)
    assert not any(k.startswith(f"{arch}.rope.scaling") for k in fields)


@pytest.mark.parametrize("weight_type", WEIGHT_TYPES)
def test_matrices_use_the_weight_type_and_norms_stay_f32(tmp_path, weight_type):
    reader = GGUFReader(write_tiny_model(tmp_path / "m.gguf", weight_type=weight_type, tied_output=False))
    for tensor in reader.tensors:
        if len(tensor.shape) == 1:
            assert tensor.tensor_type == GGMLQuantizationType.F32, tensor.name
        else:
            assert tensor.tensor_type == GGMLQuantizationType[weight_type], tensor.name


@pytest.mark.parametrize("weight_type", K_QUANT_TYPES)
def test_k_quant_defaults_give_every_matrix_256_aligned_rows(weight_type):
    spec = tiny_model_spec("qwen3", weight_type)
    assert (spec.n_embd, spec.n_ff, spec.head_dim) == (256, 512, 128)


def test_k_quant_rows_that_do_not_fit_fall_back_to_q8_0(tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", weight_type="Q4_K", n_embd=64, n_ff=256, head_dim=16)
    types = {t.name: t.tensor_type.name for t in GGUFReader(path).tensors}
    assert types["blk.0.attn_q.weight"] == "Q8_0"  # row of 64
    assert types["blk.0.ffn_down.weight"] == "Q4_K"  # row of 256


def test_per_role_tensor_types_override_the_weight_type(tmp_path):
    path = write_tiny_model(
        tmp_path / "m.gguf", weight_type="Q4_K", tensor_types={"token_embd": "Q8_0", "attn_v": "Q6_K", "attn_q": "Q5_0"}
    )
    types = {t.name: t.tensor_type.name for t in GGUFReader(path).tensors}
    assert types["token_embd.weight"] == "Q8_0"
    assert types["blk.1.attn_v.weight"] == "Q6_K"
    assert types["blk.1.attn_q.weight"] == "Q5_0"
    assert types["blk.1.ffn_up.weight"] == "Q4_K"


def test_same_arguments_write_identical_bytes(tmp_path):
    first = write_tiny_model(tmp_path / "a.gguf", "gemma3", "Q5_K", seed=3)
    second = write_tiny_model(tmp_path / "b.gguf", "gemma3", "Q5_K", seed=3)
    assert hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(second.read_bytes()).digest()


def test_seed_changes_the_weights(tmp_path):
    def embedding(seed: int) -> np.ndarray:
        reader = GGUFReader(write_tiny_model(tmp_path / f"s{seed}.gguf", seed=seed))
        return np.asarray(next(t for t in reader.tensors if t.name == "token_embd.weight").data)

    assert not np.array_equal(embedding(0), embedding(1))


def test_tensors_do_not_depend_on_unrelated_options(tmp_path):
    a = GGUFReader(write_tiny_model(tmp_path / "a.gguf", "gemma3", sliding_window=16, tied_output=True))
    b = GGUFReader(write_tiny_model(tmp_path / "b.gguf", "gemma3", sliding_window=64, tied_output=False))
    b_tensors = {t.name: t for t in b.tensors}
    for tensor in a.tensors:
        assert np.array_equal(np.asarray(tensor.data), np.asarray(b_tensors[tensor.name].data)), tensor.name


@pytest.mark.parametrize("weight_type", ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_random_k_quant_blocks_have_normal_f16_scales_and_sane_values(tmp_path, weight_type):
    reader = GGUFReader(write_tiny_model(tmp_path / "m.gguf", weight_type=weight_type))
    tensor = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
    # d is the f16 at offset 0 (Q4_K, Q5_K) or just before the block's end.
    d_offset = {"Q2_K": 80, "Q3_K": 108, "Q4_K": 0, "Q5_K": 0, "Q6_K": 208}[weight_type]
    size = {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}[weight_type]
    blocks = np.asarray(tensor.data).reshape(-1, size)
    d = blocks[:, d_offset : d_offset + 2].copy().view(np.float16).ravel()
    assert np.all(np.abs(d) >= np.float16(2.0**-14)) and np.all(np.isfinite(d))
    values = dequantize(tensor.data, tensor.tensor_type)
    assert 0.01 < values.std() < 0.2  # target 1/sqrt(512) ~ 0.044
    assert abs(values.mean()) < 0.01


def test_gpt2_vocabulary_is_byte_level_with_consistent_merges(tmp_path):
    fields = _fields(GGUFReader(write_tiny_model(tmp_path / "m.gguf", arch="qwen2")))
    tokens, types, merges = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"], fields["tokenizer.ggml.merges"]
    assert fields["tokenizer.ggml.model"] == "gpt2"
    assert len(tokens) == len(types) == N_VOCAB == len(set(tokens))
    byte_chars = gpt2_byte_to_unicode()
    assert tokens[3:259] == [byte_chars[b] for b in range(256)]
    assert tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] and types[:3] == [3, 3, 3]
    vocab = set(tokens)
    for merge in merges:
        left, right = merge.split(" ")
        assert left in vocab and right in vocab and left + right in vocab, merge
    assert (fields["tokenizer.ggml.bos_token_id"], fields["tokenizer.ggml.eos_token_id"]) == (1, 2)


def test_spm_vocabulary_has_byte_fallback_tokens_and_scores(tmp_path):
    fields = _fields(GGUFReader(write_tiny_model(tmp_path / "m.gguf", arch="gemma3")))
    tokens, types, scores = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"], fields["tokenizer.ggml.scores"]
    assert fields["tokenizer.ggml.model"] == "llama"
    assert len(tokens) == len(types) == len(scores) == N_VOCAB == len(set(tokens))
    assert tokens[:3] == ["<unk>", "<s>", "</s>"] and types[:3] == [2, 3, 3]
    assert tokens[3:259] == [f"<0x{b:02X}>" for b in range(256)] and set(types[3:259]) == {6}
    pieces = tokens[259:]
    assert all(piece for piece in pieces) and set(types[259:]) == {1}
    assert scores[259:] == sorted(scores[259:], reverse=True)
    assert fields["tokenizer.ggml.add_bos_token"] is True


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"arch": "mamba"}, "arch"),
        ({"weight_type": "IQ2_XS"}, "weight_type"),
        ({"n_head": 4, "n_head_kv": 3}, "multiple"),
        ({"head_dim": 15}, "even"),
        ({"arch": "qwen2", "head_dim": 32}, "n_embd"),
        ({"arch": "llama", "sliding_window": 8}, "gemma3"),
        ({"tensor_types": {"attn_z": "Q8_0"}}, "role"),
        ({"tokenizer": "wordpiece"}, "tokenizer"),
    ],
)
def test_invalid_arguments_raise_value_error(tmp_path, arguments, message):
    with pytest.raises(ValueError, match=message):
        write_tiny_model(tmp_path / "m.gguf", **arguments)
    assert not (tmp_path / "m.gguf").exists()
