"""Engine.embed: final hidden states against the NumPy reference on tiny
models, pooling and normalization, batching invariance, the scheduler, errors."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import muser
from tests.fixtures.numpy_reference import reference_hidden_states, reference_logits
from tests.fixtures.tiny_models import write_tiny_model

FLOAT_TOLERANCE = 2e-3  # float32 arithmetic against the float64 reference (as for the logits)


@pytest.fixture(scope="module", params=["llama", "gemma3", "qwen3"])
def tiny(request, tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("emb") / f"{request.param}.gguf", arch=request.param)
    return muser.Engine(path, threads=2)


def test_hidden_states_match_the_numpy_reference(tiny):
    tokens = [[1, 5, 9, 14, 2], [7, 7, 3]]
    states = muser.embeddings.hidden_states(tiny, tokens)
    for ids, rows in zip(tokens, states):
        assert rows.shape == (len(ids), tiny.config["n_embd"]) and rows.dtype == np.float32
        assert np.abs(rows - reference_hidden_states(tiny.path, ids)).max() <= FLOAT_TOLERANCE


def test_the_last_hidden_state_is_what_the_logits_come_from(tiny):
    ids = [3, 1, 4, 1, 5]
    (rows,) = muser.embeddings.hidden_states(tiny, [ids])
    session = tiny.session(max_context=16)
    session.prefill(ids)
    assert np.abs(session.logits - reference_logits(tiny.path, ids, rows=slice(-1, None))[0]).max() <= FLOAT_TOLERANCE
    expected = reference_hidden_states(tiny.path, ids)
    np.testing.assert_allclose(rows[-1], expected[-1], atol=FLOAT_TOLERANCE)


@pytest.mark.parametrize("pooling", ["mean", "last", "cls"])
def test_pooling_and_normalization_follow_the_reference(tiny, pooling):
    ids = [[1, 2, 3, 4], [9, 8, 7]]
    vectors = tiny.embed(ids, pooling=pooling)
    assert vectors.shape == (2, tiny.config["n_embd"]) and vectors.dtype == np.float32
    for ids_one, vector in zip(ids, vectors):
        ref = reference_hidden_states(tiny.path, ids_one)
        pooled = {"mean": ref.mean(axis=0), "last": ref[-1], "cls": ref[0]}[pooling]
        np.testing.assert_allclose(vector, pooled / np.linalg.norm(pooled), atol=FLOAT_TOLERANCE)
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    raw = tiny.embed(ids, pooling=pooling, normalize=False)
    np.testing.assert_allclose(raw[0], {"mean": reference_hidden_states(tiny.path, ids[0]).mean(axis=0),
                                        "last": reference_hidden_states(tiny.path, ids[0])[-1],
                                        "cls": reference_hidden_states(tiny.path, ids[0])[0]}[pooling],
                               atol=FLOAT_TOLERANCE)


def test_a_vector_is_bitwise_the_same_however_the_texts_are_batched(tiny):
    rng = np.random.default_rng(0)
    n_vocab = tiny.n_vocab
    texts = [rng.integers(0, n_vocab, size=n).tolist() for n in (5, 200, 1, 90, 250, 33)]
    together = tiny.embed(texts, normalize=False)
    alone = np.stack([tiny.embed([t], normalize=False)[0] for t in texts])
    assert np.array_equal(together, alone)
    states_together = muser.embeddings.hidden_states(tiny, texts)
    for text, rows in zip(texts, states_together):
        assert np.array_equal(rows, muser.embeddings.hidden_states(tiny, [text])[0])


def test_embedding_runs_as_batched_prefills_under_the_scheduler(tiny):
    before = tiny.scheduler_stats()
    tiny.embed([[1, 2, 3]] * 6 + [[4] * 100])  # 118 rows: one forward of up to 512
    after = tiny.scheduler_stats()
    chunk_keys = [k for k in after if "prefill" in k and ("chunks" in k or "grants" in k)]
    assert chunk_keys, after
    assert any(after[k] - before[k] == 1 for k in chunk_keys), (before, after)


def test_embedding_while_generating_lets_the_decoder_run(tiny):
    pool = muser.SlotPool(tiny, slots=1, max_context=128)
    result: dict[str, str] = {}
    worker = threading.Thread(target=lambda: result.setdefault(
        "text", muser.generate(pool, [1, 2, 3], max_tokens=30, temperature=0)))
    worker.start()
    vectors = tiny.embed([[5] * 200] * 8)
    worker.join(timeout=120)
    assert result["text"] == muser.generate(pool, [1, 2, 3], max_tokens=30, temperature=0)
    assert vectors.shape[0] == 8


def test_strings_are_tokenized_and_one_string_gives_one_vector(tiny):
    vector = tiny.embed("hello world")
    assert vector.shape == (tiny.config["n_embd"],)
    assert np.array_equal(vector, tiny.embed([tiny.tokenize("hello world")])[0])


def test_bad_input_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match="pooling"):
        tiny.embed(["a"], pooling="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has no tokens"):
        tiny.embed([[]])
    with pytest.raises(ValueError, match="out of range"):
        tiny.embed([[tiny.n_vocab]])
    with pytest.raises(ValueError, match=r"expected 1\.\.\d+ tokens"):
        tiny.embed([[1] * (tiny.config["context_length"] + 1)])
    cancel = muser.CancelToken()
    cancel.cancel()
    with pytest.raises(muser.Cancelled):
        tiny.embed([[1, 2]], cancel=cancel)
    assert tiny.embed([]).shape == (0, tiny.config["n_embd"])


def test_the_null_backend_gives_repeatable_vectors(tmp_path):
    engine = muser.Engine(write_tiny_model(tmp_path / "m.gguf"), backend="null")
    a = engine.embed([[1, 2, 3], [4]])
    assert np.array_equal(a, engine.embed([[1, 2, 3], [4]])) and not np.array_equal(a[0], a[1])
