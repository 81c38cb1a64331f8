"""A GGUF file is untrusted input: every defect raises ModelFormatError naming
what is wrong, never a crash, a hang or a huge allocation."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import muser
from muser import _core
from tests.fixtures.gguf_bytes import (
    ARRAY, BOOL, I32, STRING, U8, U32, GgufBytes, Tensor, gguf_string, valid_file,
)


def _open(tmp_path, data: bytes):
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    return _core.GgufFile.open(str(path))


def _raises(tmp_path, data: bytes, *fragments: str) -> str:
    with pytest.raises(muser.ModelFormatError) as info:
        _open(tmp_path, data)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_the_valid_base_file_loads(tmp_path):
    f = _open(tmp_path, valid_file().build())
    assert f.metadata()["general.name"] == "tiny ünïcode"
    assert [t[0] for t in f.tensor_infos()] == ["weight.f32", "weight.f16", "weight.q8_0"]


def _with(**changes) -> bytes:
    base = valid_file()
    for name, value in changes.items():
        setattr(base, name, value)
    return base.build()


def test_wrong_magic_names_the_magic(tmp_path):
    _raises(tmp_path, _with(magic=b"GGML"), "expected magic 'GGUF'", "'GGML'")


def test_empty_file(tmp_path):
    _raises(tmp_path, b"", "expected magic 'GGUF'", "0 bytes")


@pytest.mark.parametrize("version", [0, 1, 4, 0x03000000])
def test_unsupported_version_is_named_with_expected_and_actual(tmp_path, version):
    _raises(tmp_path, _with(version=version), "expected 2 or 3", f"got {version}")


def test_metadata_count_that_cannot_fit(tmp_path):
    _raises(tmp_path, _with(n_kv_override=2**62), "metadata count")


def test_tensor_count_that_cannot_fit(tmp_path):
    _raises(tmp_path, _with(n_tensors_override=2**60), "tensor count")


def test_truncation_at_every_boundary_is_rejected(tmp_path):
    data = valid_file().build()
    # Every prefix shorter than the tensor data end must fail cleanly.
    for cut in list(range(0, 120)) + list(range(120, len(data) - 1, 7)):
        with pytest.raises(muser.ModelFormatError):
            _open(tmp_path, data[:cut])


def test_string_length_past_the_end_names_the_key(tmp_path):
    base = valid_file().build()
    key = b"general.name"
    at = base.index(key) + len(key) + 4  # after the key, its type tag: the value's length field
    broken = base[:at] + struct.pack("<Q", 2**63 - 1) + base[at + 8:]
    _raises(tmp_path, broken, "general.name", "truncated")


def test_array_count_that_cannot_fit_names_the_key(tmp_path):
    f = GgufBytes().add("big.array", ARRAY, (U32, []))
    data = bytearray(f.build())
    at = data.index(b"big.array") + len(b"big.array") + 4 + 4
    data[at:at + 8] = struct.pack("<Q", 2**61)
    _raises(tmp_path, bytes(data), "big.array", "cannot fit")


def test_unknown_value_type(tmp_path):
    _raises(tmp_path, GgufBytes().add("weird", 13, b"").build(), "weird", "unknown value type 13")


def test_unknown_array_element_type(tmp_path):
    data = bytearray(GgufBytes().add("arr", ARRAY, (U8, [])).build())
    at = data.index(b"arr") + 3 + 4
    data[at:at + 4] = struct.pack("<I", 99)
    _raises(tmp_path, bytes(data), "arr", "unknown array element type 99")


def test_bool_other_than_zero_or_one(tmp_path):
    data = bytearray(GgufBytes().add("flag", BOOL, True).build())
    data[-1] = 7
    _raises(tmp_path, bytes(data), "flag", "bool must be 0 or 1, got 7")


def test_arrays_nested_too_deep(tmp_path):
    value = (I32, [1])
    for _ in range(6):
        value = (ARRAY, [value])
    _raises(tmp_path, GgufBytes().add("deep", ARRAY, value).build(), "deep", "nested deeper")


def test_duplicate_key(tmp_path):
    f = GgufBytes().add("same", U32, 1).add("same", U32, 2)
    _raises(tmp_path, f.build(), "duplicate key 'same'")


def test_duplicate_tensor_name(tmp_path):
    f = valid_file()
    f.tensors.append(Tensor("weight.f32", [8], 0, bytes(32)))
    _raises(tmp_path, f.build(), "duplicate tensor 'weight.f32'")


@pytest.mark.parametrize("dims", [[], [1, 1, 1, 1, 1]])
def test_dimension_count_out_of_range(tmp_path, dims):
    f = valid_file()
    f.tensors[0] = Tensor("weight.f32", dims, 0, bytes(96))
    _raises(tmp_path, f.build(), "weight.f32", "dimensions")


def test_zero_dimension(tmp_path):
    f = valid_file()
    f.tensors[0] = Tensor("weight.f32", [8, 0], 0, bytes(96))
    _raises(tmp_path, f.build(), "weight.f32", "dimension 1 = 0")


def test_element_count_overflow(tmp_path):
    f = valid_file()
    f.tensors[0] = Tensor("weight.f32", [2**32, 2**32], 0, bytes(96))
    _raises(tmp_path, f.build(), "weight.f32", "overflow")


@pytest.mark.parametrize("type_id, name", [(16, "IQ2_XXS"), (99, "type 99"), (24, "I8")])
def test_unsupported_tensor_type_is_named(tmp_path, type_id, name):
    f = valid_file()
    f.tensors[1] = Tensor("weight.f16", [32, 2], type_id, bytes(128))
    _raises(tmp_path, f.build(), "weight.f16", name, "supported: F32")


def test_row_length_not_a_block_multiple(tmp_path):
    f = valid_file()
    f.tensors[2] = Tensor("weight.q8_0", [48], 8, bytes(68))
    _raises(tmp_path, f.build(), "weight.q8_0", "not a multiple", "Q8_0 block size 32")


def test_misaligned_tensor_offset(tmp_path):
    f = valid_file()
    f.tensors[1].offset = 100
    _raises(tmp_path, f.build(), "weight.f16", "not a multiple of the alignment 32")


def test_tensor_out_of_bounds(tmp_path):
    f = valid_file()
    f.tensors[2].offset = 1 << 20
    _raises(tmp_path, f.build(), "weight.q8_0", "runs past the end")


def test_offset_plus_size_overflow(tmp_path):
    f = valid_file()
    f.tensors[2].offset = 2**64 - 32
    _raises(tmp_path, f.build(), "weight.q8_0", "runs past the end")


@pytest.mark.parametrize("alignment", [0, 3, 48])
def test_alignment_must_be_a_power_of_two(tmp_path, alignment):
    f = GgufBytes().add("general.alignment", U32, alignment)
    _raises(tmp_path, f.build(), "general.alignment", "power of two")


def test_alignment_of_the_wrong_type(tmp_path):
    f = GgufBytes().add("general.alignment", STRING, "32")
    _raises(tmp_path, f.build(), "general.alignment", "expected uint32, got string")


def test_file_that_is_not_there(tmp_path):
    with pytest.raises(muser.ModelFormatError, match="cannot open"):
        _core.GgufFile.open(str(tmp_path / "missing.gguf"))


def test_a_directory_is_not_a_model(tmp_path):
    with pytest.raises(muser.ModelFormatError, match="not a regular file"):
        _core.GgufFile.open(str(tmp_path))


def test_raw_key_length_past_end(tmp_path):
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string(b"k", length=1 << 40) + bytes(64)
    _raises(tmp_path, data, "metadata #0 key", "truncated")


_BASE = valid_file().build()


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, len(_BASE) - 1), st.integers(0, 255)), min_size=1, max_size=8),
       cut=st.integers(0, len(_BASE)))
def test_mutated_files_either_load_or_raise_model_format_error(tmp_path, edits, cut):
    data = bytearray(_BASE)
    for position, value in edits:
        data[position] = value
    try:
        f = _open(tmp_path, bytes(data[:cut]))
    except muser.ModelFormatError:
        return
    # Whatever loaded must be readable end to end without faults.
    f.metadata()
    for name, _type, _shape, _offset, n_bytes in f.tensor_infos():
        if isinstance(name, str):
            assert f.tensor_bytes(name).nbytes == n_bytes
