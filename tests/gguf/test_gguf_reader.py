"""The C++ GGUF reader reports exactly what the `gguf` package's reader reports."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gguf

from muser import _core
from tests.fixtures.gguf_bytes import valid_file


def _same(ours, theirs) -> bool:
    if isinstance(theirs, float):
        return isinstance(ours, float) and (ours == theirs or (math.isnan(ours) and math.isnan(theirs)))
    if isinstance(theirs, list):
        return isinstance(ours, list) and len(ours) == len(theirs) and all(map(_same, ours, theirs))
    return ours == theirs and type(ours) is type(theirs)


# gguf's ReaderField.contents() flattens arrays of arrays, so nested arrays are
# checked against their known value instead (see the hand-built test).
_NESTED_KEYS = {"test.nested"}


def _assert_matches_gguf_reader(path) -> None:
    ours = _core.GgufFile.open(str(path))
    theirs = gguf.GGUFReader(str(path))
    metadata = ours.metadata()
    expected_keys = [k for k in theirs.fields if not k.startswith("GGUF.")]
    assert list(metadata) == expected_keys
    for key in expected_keys:
        if key in _NESTED_KEYS:
            continue
        assert _same(metadata[key], theirs.fields[key].contents()), key
    infos = ours.tensor_infos()
    assert [i[0] for i in infos] == [t.name for t in theirs.tensors]
    for (name, type_id, shape, offset, n_bytes), tensor in zip(infos, theirs.tensors):
        assert type_id == int(tensor.tensor_type), name
        assert list(shape) == [int(d) for d in tensor.shape], name
        assert n_bytes == int(tensor.n_bytes), name
        assert offset == int(tensor.data_offset) - ours.data_offset, name
        assert np.array_equal(ours.tensor_bytes(name), np.asarray(tensor.data).view(np.uint8).reshape(-1)), name


def test_every_key_and_tensor_equals_what_the_gguf_package_reads(tmp_path):
    path = tmp_path / "written_by_gguf.gguf"
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name("tiny")
    writer.add_uint32("test.u32", 7)
    writer.add_int64("test.i64", -(2**40))
    writer.add_float32("test.f32", 0.1)
    writer.add_float64("test.f64", 1e-300)
    writer.add_bool("test.bool", False)
    writer.add_string("test.utf8", "café 東京 🚀")
    writer.add_array("test.ints", [1, 2, 3])
    writer.add_array("test.strs", ["x", "yy", ""])
    writer.add_array("test.floats", [0.5, -2.0])
    rng = np.random.default_rng(1)
    writer.add_tensor("a", rng.standard_normal((4, 32)).astype(np.float32))
    writer.add_tensor("b", rng.standard_normal((3, 64)).astype(np.float16))
    q8 = gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("c", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    _assert_matches_gguf_reader(path)


def test_hand_built_file_with_every_value_type_matches_the_gguf_package(tmp_path):
    path = tmp_path / "hand_built.gguf"
    path.write_bytes(valid_file().build())
    _assert_matches_gguf_reader(path)
    assert _core.GgufFile.open(str(path)).metadata()["test.nested"] == [[1, 2], []]


@pytest.mark.parametrize("vocab", ["llama-spm", "gpt-2", "qwen2"])
def test_reference_vocab_files_match_the_gguf_package(reference_dir, vocab):
    _assert_matches_gguf_reader(reference_dir / "tokenizer" / f"ggml-vocab-{vocab}.gguf")


def test_tensor_bytes_view_keeps_the_mapping_alive(tmp_path):
    path = tmp_path / "f.gguf"
    path.write_bytes(valid_file().build())
    view = _core.GgufFile.open(str(path)).tensor_bytes("weight.f32")
    # The file object is gone; the view must still read the mapped bytes.
    assert view.nbytes == 3 * 8 * 4
    assert not view.flags.writeable
    assert np.isfinite(view.view(np.float32)).all()
