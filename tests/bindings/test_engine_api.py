"""The Python surface of Engine and Session: types, copies, lifetimes."""

from __future__ import annotations

import numpy as np
import pytest

import muser


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from tests.fixtures.tiny_models import write_tiny_model

    path = write_tiny_model(tmp_path_factory.mktemp("api") / "qwen3.gguf", "qwen3", "Q8_0", seed=3)
    return muser.Engine(path, threads=1)


def test_public_names_are_exported():
    assert muser.Engine is muser.engine.Engine and muser.Session is muser.engine.Session
    assert muser.SessionSnapshot is muser._core.SessionSnapshot


def test_config_describes_the_model(engine):
    config = engine.config
    assert config["architecture"] == "qwen3"
    assert config["n_vocab"] == 300 and config["context_length"] == 256
    assert config["n_layer"] == 2 and config["n_head"] == 4 and config["n_head_kv"] == 2
    assert config["head_dim_k"] == 32 and config["rope_style"] == "neox"
    assert config["backend"] == "cpu" and config["threads"] == 1
    assert set(config["special_tokens"]) >= {"bos", "eos"}
    assert config["chat_template"].startswith("{% for message in messages %}")  # the tiny gpt2 vocab has ChatML
    config["n_vocab"] = 0  # a copy: the engine is unaffected
    assert engine.config["n_vocab"] == 300


def test_metadata_is_every_gguf_key(engine):
    metadata = engine.metadata()
    assert metadata["general.architecture"] == "qwen3"
    assert metadata["qwen3.block_count"] == 2
    assert len(metadata["tokenizer.ggml.tokens"]) == 300


def test_logits_are_a_float32_copy_owned_by_the_caller(engine):
    session = engine.session()
    assert session.logits is None
    session.prefill([1, 2, 3])
    first = session.logits
    assert first.dtype == np.float32 and first.shape == (300,)
    kept = first.copy()
    first[:] = 0  # writing to the copy does not reach the session
    assert np.array_equal(session.logits, kept)
    held = session.logits
    session.decode(4)
    assert np.array_equal(held, kept)  # an array handed out earlier never changes
    assert not np.array_equal(session.logits, kept)


def test_tokens_and_positions(engine):
    session = engine.session(max_context=64)
    assert session.max_context == 64 and session.n_past == 0 and session.tokens == []
    session.prefill(np.array([7, 8, 9], dtype=np.int64))  # numpy integers are accepted
    session.decode(np.int32(10))
    assert session.tokens == [7, 8, 9, 10] and session.n_past == 4
    tokens = session.tokens
    tokens.append(99)
    assert session.tokens == [7, 8, 9, 10]


def test_default_context_is_capped_by_the_model(engine):
    assert engine.session().max_context == min(4096, engine.config["context_length"])


def test_kv_memory_grows_with_the_sequence(engine):
    session = engine.session()
    empty = session.kv_bytes
    session.prefill(list(range(200)))
    assert session.kv_bytes > empty


def test_snapshot_reports_its_size_and_position(engine):
    session = engine.session()
    session.prefill([1, 2, 3, 4])
    snap = session.snapshot()
    assert snap.n_past == 4 and snap.nbytes > 0


def test_a_session_keeps_its_engine_alive(tmp_path):
    from tests.fixtures.tiny_models import write_tiny_model

    path = write_tiny_model(tmp_path / "llama.gguf", "llama", "F32", seed=0)
    session = muser.Engine(path, threads=1).session()
    import gc

    gc.collect()
    session.prefill([1, 2])
    assert session.engine.config["architecture"] == "llama"
    assert session.logits.shape == (300,)


def test_repr_names_the_model(engine):
    assert "qwen3.gguf" in repr(engine) and "backend='cpu'" in repr(engine)
    assert repr(engine.session(max_context=8)) == "Session(n_past=0, max_context=8)"
