"""Item 6: the loader validates everything config, the tokenizer and generation
rely on later, so a file that loads can generate; what cannot be used is
refused at load with ModelFormatError naming the key."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType

import muser
from tests.integration.test_model_format_errors import rewrite


@pytest.fixture(scope="module")
def base(tiny_model):
    return tiny_model("llama", tokenizer="gpt2")


@pytest.mark.parametrize("key", ["tokenizer.ggml.padding_token_id", "tokenizer.ggml.seperator_token_id"])
def test_a_negative_optional_special_id_loads_and_generates(base, tmp_path, key):
    path = rewrite(base, tmp_path / "neg.gguf", set_keys={key: (-1, GGUFValueType.INT32)})
    engine = muser.Engine(path, backend="null", threads=1)
    assert isinstance(engine.config, dict)
    pool = muser.SlotPool(engine, slots=1)
    assert isinstance(muser.generate(pool, "hello", max_tokens=3, temperature=0), str)


@pytest.mark.parametrize("value, vtype", [(7, GGUFValueType.UINT32), ([1, 2], GGUFValueType.ARRAY),
                                          (True, GGUFValueType.BOOL)])
def test_a_chat_template_that_is_not_a_string_is_refused_at_load(base, tmp_path, value, vtype):
    if vtype == GGUFValueType.ARRAY:
        path = tmp_path / "t.gguf"
        from gguf import GGUFWriter

        reader = GGUFReader(base)
        writer = GGUFWriter(path, reader.fields["general.architecture"].contents())
        for k, field in reader.fields.items():
            if k.startswith("GGUF.") or k == "general.architecture":
                continue
            t = field.types[0]
            writer.add_key_value(k, field.contents(), t, sub_type=field.types[-1] if t == GGUFValueType.ARRAY else None)
        writer.add_array("tokenizer.chat_template", value)
        for tensor in reader.tensors:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    else:
        path = rewrite(base, tmp_path / "t.gguf", set_keys={"tokenizer.chat_template": (value, vtype)})
    with pytest.raises(muser.ModelFormatError, match="tokenizer.chat_template"):
        muser.Engine(path, backend="null", threads=1)


def test_a_vocab_size_larger_than_the_token_list_is_refused_at_load(base, tmp_path):
    reader = GGUFReader(base)
    n_tokens = len(reader.fields["tokenizer.ggml.tokens"].contents())
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    rows = np.asarray(embd.data, dtype=np.float32).reshape(n_tokens, -1)
    padded = np.concatenate([rows, np.ones((16, rows.shape[1]), dtype=np.float32)])
    path = rewrite(base, tmp_path / "v.gguf", set_keys={"llama.vocab_size": (n_tokens + 16, GGUFValueType.UINT32)},
                   replace_tensors={"token_embd.weight": padded})
    with pytest.raises(muser.ModelFormatError, match="vocab_size"):
        muser.Engine(path, backend="null", threads=1)
