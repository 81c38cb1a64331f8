"""A model file whose architecture, hyperparameters or tensors do not fit
what muser runs fails to load with ModelFormatError naming the key or tensor,
with expected vs actual -- never a crash and never wrong logits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import quantize

import muser


def rewrite(
    src: Path,
    dst: Path,
    *,
    architecture: str | None = None,
    drop_keys: tuple[str, ...] = (),
    set_keys: dict[str, tuple[object, GGUFValueType]] | None = None,
    drop_tensors: tuple[str, ...] = (),
    replace_tensors: dict[str, np.ndarray] | None = None,
    raw_tensors: dict[str, tuple[np.ndarray, GGMLQuantizationType]] | None = None,
) -> Path:
    """Copy a GGUF file with some keys or tensors removed, changed or added.

    replace_tensors: float32 arrays (numpy order), added when the file has no
    tensor of that name; raw_tensors: (bytes as uint8 rows, storage type) for
    quantized replacements.
    """
    reader = GGUFReader(src)
    set_keys = set_keys or {}
    replace_tensors = replace_tensors or {}
    raw_tensors = raw_tensors or {}
    arch = architecture or reader.fields["general.architecture"].contents()
    writer = GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in drop_keys or key in set_keys:
            continue
        vtype = field.types[0]
        writer.add_key_value(key, field.contents(), vtype, sub_type=field.types[-1] if vtype == GGUFValueType.ARRAY else None)
    for key, (value, vtype) in set_keys.items():
        writer.add_key_value(key, value, vtype)
    for tensor in reader.tensors:
        if tensor.name in drop_tensors:
            continue
        if tensor.name in replace_tensors:
            writer.add_tensor(tensor.name, replace_tensors[tensor.name])
        elif tensor.name in raw_tensors:
            data, dtype = raw_tensors[tensor.name]
            writer.add_tensor(tensor.name, data, raw_dtype=dtype)
        else:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    present = {tensor.name for tensor in reader.tensors}
    for name, data in replace_tensors.items():
        if name not in present:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def _load_error(path: Path, backend: str = "cpu") -> str:
    with pytest.raises(muser.ModelFormatError) as info:
        muser.Engine(path, threads=1, backend=backend)
    return str(info.value)


@pytest.fixture
def llama(tiny_model):
    return tiny_model("llama", "F32", seed=1)  # n_embd 64, 4 heads of 16, 2 KV heads, n_ff 128


def test_the_unmodified_copy_loads(llama, tmp_path):
    engine = muser.Engine(rewrite(llama, tmp_path / "copy.gguf"), threads=1)
    assert engine.config["architecture"] == "llama"


@pytest.mark.parametrize("backend", ["cpu", "null"])
def test_unsupported_architecture_lists_the_supported_ones(llama, tmp_path, backend):
    message = _load_error(rewrite(llama, tmp_path / "m.gguf", architecture="gpt2"), backend)
    assert "'gpt2'" in message
    for name in ("llama", "mistral", "qwen2", "qwen3", "gemma3", "phi3", "olmo2"):
        assert name in message


def test_missing_tensor_is_named_with_its_expected_shape(llama, tmp_path):
    message = _load_error(rewrite(llama, tmp_path / "m.gguf", drop_tensors=("blk.1.ffn_up.weight",)))
    assert "missing tensor 'blk.1.ffn_up.weight'" in message
    assert "[64, 128]" in message


def test_wrong_vector_shape_names_expected_and_actual(llama, tmp_path):
    bad = {"blk.0.attn_norm.weight": np.ones(65, dtype=np.float32)}
    message = _load_error(rewrite(llama, tmp_path / "m.gguf", replace_tensors=bad))
    assert "tensor 'blk.0.attn_norm.weight': expected shape [64], got [65]" in message


def test_wrong_matrix_shape_names_expected_and_actual(llama, tmp_path):
    # numpy order (outputs, inputs): 3 KV heads' worth of keys instead of 2.
    bad = {"blk.1.attn_k.weight": np.zeros((48, 64), dtype=np.float32)}
    message = _load_error(rewrite(llama, tmp_path / "m.gguf", replace_tensors=bad))
    assert "tensor 'blk.1.attn_k.weight': expected shape [64, 32], got [64, 48]" in message


def test_missing_hyperparameter_is_named(llama, tmp_path):
    message = _load_error(rewrite(llama, tmp_path / "m.gguf", drop_keys=("llama.embedding_length",)))
    assert "llama.embedding_length" in message


def test_head_counts_that_do_not_divide_are_rejected(llama, tmp_path):
    keys = {"llama.attention.head_count_kv": (3, GGUFValueType.UINT32)}
    message = _load_error(rewrite(llama, tmp_path / "m.gguf", set_keys=keys))
    assert "head_count_kv" in message and "got 3" in message


def test_unsupported_rope_scaling_is_rejected(llama, tmp_path):
    keys = {"llama.rope.scaling.type": ("yarn", GGUFValueType.STRING)}
    message = _load_error(rewrite(llama, tmp_path / "m.gguf", set_keys=keys))
    assert "rope.scaling.type" in message and "'yarn'" in message


def test_qwen2_without_its_biases_is_rejected(tiny_model, tmp_path):
    path = tiny_model("qwen2", "F32", seed=1)
    message = _load_error(rewrite(path, tmp_path / "m.gguf", drop_tensors=("blk.0.attn_q.bias",)))
    assert "missing tensor 'blk.0.attn_q.bias'" in message


def test_gemma3_without_post_norms_is_rejected(tiny_model, tmp_path):
    path = tiny_model("gemma3", "F32", seed=1)
    message = _load_error(rewrite(path, tmp_path / "m.gguf", drop_tensors=("blk.2.post_ffw_norm.weight",)))
    assert "missing tensor 'blk.2.post_ffw_norm.weight'" in message


def test_quantized_norm_weight_is_rejected(llama, tmp_path):
    # The graph reads norm weights as floats; a Q8_0 one is refused by name.
    q8 = quantize(np.ones((1, 64), dtype=np.float32), GGMLQuantizationType.Q8_0).reshape(-1)
    bad = {"output_norm.weight": (q8, GGMLQuantizationType.Q8_0)}
    message = _load_error(rewrite(llama, tmp_path / "m.gguf", raw_tensors=bad))
    assert "tensor 'output_norm.weight': expected type F32, F16 or BF16, got Q8_0" in message


def test_quantized_model_survives_the_rewrite(tiny_model, tmp_path):
    path = tiny_model("llama", "Q4_K", seed=1)
    copy = rewrite(path, tmp_path / "copy.gguf")
    a = muser.Engine(path, threads=1).session()
    b = muser.Engine(copy, threads=1).session()
    a.prefill([1, 2, 3])
    b.prefill([1, 2, 3])
    assert np.array_equal(a.logits, b.logits)


def test_phi3_longrope_factors_are_refused(tiny_model, tmp_path):
    phi3 = tiny_model("phi3", "F32", seed=1)
    factors = {"rope_factors_long.weight": np.ones(8, dtype=np.float32)}
    message = _load_error(rewrite(phi3, tmp_path / "m.gguf", replace_tensors=factors))
    assert "rope_factors_long" in message


def test_olmo2_sliding_window_is_refused(tiny_model, tmp_path):
    olmo2 = tiny_model("olmo2", "F32", seed=1)
    keys = {"olmo2.attention.sliding_window": (8, GGUFValueType.UINT32)}
    message = _load_error(rewrite(olmo2, tmp_path / "m.gguf", set_keys=keys))
    assert "olmo2.attention.sliding_window" in message


def test_olmo2_without_an_output_matrix_is_refused(tiny_model, tmp_path):
    olmo2 = tiny_model("olmo2", "F32", seed=1)
    message = _load_error(rewrite(olmo2, tmp_path / "m.gguf", drop_tensors=("output.weight",)))
    assert "output.weight" in message
