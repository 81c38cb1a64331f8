"""Sessions saved to disk: safetensors contents, bitwise continuation (KV,
logits, the sampler chain's Mt19937 streams and grammar position), model and
backend checks, untrusted files, and the prompt-cache recipe."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

import muser
from muser import session_files
from muser.sampling import SamplingParams, make_sampler
from tests.fixtures.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return muser.Engine(write_tiny_model(tmp_path_factory.mktemp("sf") / "llama.gguf", weight_type="Q8_0"),
                        threads=2)


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory):
    return muser.Engine(write_tiny_model(tmp_path_factory.mktemp("sfg") / "gemma3.gguf", arch="gemma3"), threads=2)


def _greedy(session: muser.Session, steps: int) -> list[np.ndarray]:
    out = []
    for _ in range(steps):
        logits = session.logits
        assert logits is not None
        session.decode(int(np.argmax(logits)))
        out.append(session.logits)
    return out


@pytest.mark.parametrize("engine_name", ["tiny", "tiny_gemma"])
def test_continuing_after_load_is_bitwise_never_stopping(engine_name, request, tmp_path):
    engine = request.getfixturevalue(engine_name)
    session = engine.session(max_context=128)
    session.prefill(list(range(1, 40)))
    _greedy(session, 5)
    path = session.save(tmp_path / "s.safetensors")
    loaded = engine.load_session(path)
    assert loaded.tokens == session.tokens and loaded.max_context == 128
    assert np.array_equal(loaded.logits, session.logits)
    for a, b in zip(_greedy(session, 12), _greedy(loaded, 12)):
        assert np.array_equal(a, b)


def test_the_file_is_safetensors_with_a_header_naming_model_and_backend(tiny, tmp_path):
    session = tiny.session(max_context=64)
    session.prefill([1, 2, 3, 4])
    path = session.save(tmp_path / "s.safetensors")
    tensors = load_file(path)
    assert tensors["tokens"].tolist() == [1, 2, 3, 4] and tensors["tokens"].dtype == np.int32
    assert np.array_equal(tensors["logits"], session.logits)
    n_layer = tiny.config["n_layer"]
    assert {f"kv.{i}.{kv}" for i in range(n_layer) for kv in "kv"} <= set(tensors)
    assert tensors["kv.0.k"].dtype == np.uint16 and tensors["kv.0.k"].shape[0] == 4
    with safe_open(path, framework="numpy") as handle:
        metadata = handle.metadata()
    assert metadata["format"] == "muser.session" and metadata["backend"] == tiny.backend
    assert metadata["model_sha256"] == tiny.model_sha256 and len(tiny.model_sha256) == 64
    assert session_files.read_metadata(path) == metadata


def test_an_empty_session_round_trips(tiny, tmp_path):
    loaded = tiny.load_session(tiny.session(max_context=16).save(tmp_path / "empty.safetensors"))
    assert loaded.n_past == 0 and loaded.logits is None


def test_the_sampler_chain_and_grammar_continue_exactly(tiny, tmp_path):
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, xtc_probability=0.5,
                            xtc_threshold=0.05, repeat_penalty=1.1)
    token_bytes, _ = tiny.vocabulary()
    grammar = muser.Grammar('root ::= [a-z .]+')  # never ends: every step has letters to choose from

    def chain(seed: int):
        return make_sampler(params, seed, grammar=grammar.constraint(token_bytes, ()))

    def step(session, sampler, n):
        out = []
        for _ in range(n):
            token = sampler.sample(session.logits)
            sampler.accept(token)
            session.decode(token)
            out.append(token)
        return out

    session = tiny.session(max_context=128)
    session.prefill([1, 2, 3])
    sampler = chain(1234)
    sampler.accept_prompt([1, 2, 3])
    step(session, sampler, 6)
    path = session.save(tmp_path / "s.safetensors", sampler=sampler)
    expected = step(session, sampler, 10)

    resumed_sampler = chain(99)  # another seed: the file's streams replace it
    loaded = tiny.load_session(path, sampler=resumed_sampler)
    assert step(loaded, resumed_sampler, 10) == expected
    assert resumed_sampler.grammar.snapshot() == sampler.grammar.snapshot()

    metadata = session_files.read_metadata(path)
    saved = json.loads(metadata["sampler"])
    assert saved["names"] == list(sampler.names) and "grammar" in saved
    assert any(name.endswith(".mt19937") for name in load_file(path))
    with pytest.raises(ValueError, match="grammar"):
        tiny.load_session(path, sampler=make_sampler(params, 1))
    with pytest.raises(ValueError, match="snapshot is of a chain"):
        tiny.load_session(path, sampler=make_sampler(SamplingParams(temperature=0.5, samplers=("temperature",)),
                                                     1, grammar=grammar.constraint(token_bytes, ())))


def test_loading_into_another_model_names_both(tiny, tiny_gemma, tmp_path):
    session = tiny.session(max_context=32)
    session.prefill([1, 2])
    path = session.save(tmp_path / "s.safetensors")
    with pytest.raises(muser.SessionFileError, match=r"saved from model .*not from this engine's .*load it into"):
        tiny_gemma.load_session(path)


def test_loading_with_another_backend_is_refused(tiny, tmp_path):
    session = tiny.session(max_context=32)
    session.prefill([1, 2])
    path = session.save(tmp_path / "s.safetensors")
    null = muser.Engine(tiny.path, backend="null")
    with pytest.raises(muser.SessionFileError, match="'cpu' backend; this engine uses 'null'"):
        null.load_session(path)


@pytest.mark.parametrize("damage", ["truncate", "header", "offsets", "tokens", "kv_shape", "format"])
def test_damaged_files_are_clear_errors(tiny, tmp_path, damage):
    session = tiny.session(max_context=32)
    session.prefill([1, 2, 3])
    path = tmp_path / "s.safetensors"
    session.save(path)
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "header":
        path.write_bytes(data[:8] + b"[" + data[9:])  # no longer a JSON object
    else:
        if damage == "offsets":
            header["tokens"]["data_offsets"][1] += 10 ** 9
        elif damage == "tokens":
            header["__metadata__"]["n_past"] = "7"
        elif damage == "kv_shape":
            header["kv.0.k"]["shape"][1] += 1
        else:
            header["__metadata__"]["format"] = "other"
        encoded = json.dumps(header).encode()
        encoded += b" " * (-len(encoded) % 8)
        path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + data[8 + size:])
    with pytest.raises(muser.SessionFileError):
        tiny.load_session(path)


def test_prompt_cache_recipe_a_saved_prefix_serves_many_requests(tiny, tmp_path):
    prefix = list(range(5, 70))  # e.g. a long system prompt
    cache = tiny.session(max_context=128)
    cache.prefill(prefix)
    path = cache.save(tmp_path / "prefix.safetensors")
    for suffix in ([100, 101], [7], [42, 43, 44]):
        request = tiny.load_session(path)
        request.prefill(suffix)
        fresh = tiny.session(max_context=128)
        fresh.prefill(prefix + suffix)
        assert np.array_equal(request.logits, fresh.logits)
        assert [np.array_equal(a, b) for a, b in zip(_greedy(request, 4), _greedy(fresh, 4))] == [True] * 4


@pytest.mark.slow
@pytest.mark.real_model
def test_a_sliding_window_ring_that_wrapped_round_trips(gemma3_path, tmp_path):
    engine = muser.Engine(gemma3_path, threads=2)
    session = engine.session(max_context=2048)
    session.prefill([2] + [int(t) for t in np.random.default_rng(1).integers(3, 5000, size=1200)])
    path = session.save(tmp_path / "long.safetensors")
    layers = json.loads(session_files.read_metadata(path)["kv_layers"])
    assert any(layer["ring"] and layer["first_position"] > 0 for layer in layers)  # the ring wrapped
    loaded = engine.load_session(path)
    for a, b in zip(_greedy(session, 6), _greedy(loaded, 6)):
        assert np.array_equal(a, b)
