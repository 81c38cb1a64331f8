"""The exactness contract (DESIGN.md): how a sequence was fed never changes
its bits. Prefill in one call, token by token, or in any split gives the same
logits; snapshot/restore and truncate rejoin the never-interrupted path.
All comparisons are np.array_equal, not approximate."""

from __future__ import annotations

import numpy as np
import pytest

import muser

N_VOCAB = 300


def _tokens(n: int, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, N_VOCAB, size=n)]


def _engine(path) -> muser.Engine:
    return muser.Engine(path, threads=2)


@pytest.fixture(params=["llama", "qwen2", "qwen3", "gemma3", "phi3", "olmo2"])
def model_path(request, tiny_model):
    return tiny_model(request.param, "Q4_0", seed=3, context_length=1024)


def test_prefill_all_equals_token_by_token_decode(model_path):
    engine = _engine(model_path)
    tokens = _tokens(60)
    whole = engine.session()
    whole.prefill(tokens)
    stepwise = engine.session()
    for token in tokens:
        stepwise.decode(token)
    assert np.array_equal(whole.logits, stepwise.logits)
    assert whole.tokens == stepwise.tokens == tokens
    assert whole.n_past == stepwise.n_past == 60


@pytest.mark.parametrize("sizes", [[1, 59], [7, 13, 40], [31, 1, 1, 2, 25], [59, 1]])
def test_prefill_in_any_split_equals_one_call(model_path, sizes):
    engine = _engine(model_path)
    tokens = _tokens(sum(sizes), seed=1)
    whole = engine.session()
    whole.prefill(tokens)
    pieces = engine.session()
    start = 0
    for size in sizes:
        pieces.prefill(tokens[start : start + size])
        start += size
    assert pieces.tokens == tokens
    assert np.array_equal(whole.logits, pieces.logits)


def test_prefill_longer_than_one_chunk_equals_decode(tiny_model):
    # 700 tokens: the prefill runs as a 512-row and a 188-row chunk; gemma3's
    # ring planes (16 + 511 rows) wrap during it.
    path = tiny_model("gemma3", "Q8_0", seed=4, context_length=1024)
    engine = _engine(path)
    tokens = _tokens(700, seed=2)
    whole = engine.session(max_context=1024)
    whole.prefill(tokens)
    stepwise = engine.session(max_context=1024)
    stepwise.prefill(tokens[:300])
    for token in tokens[300:]:
        stepwise.decode(token)
    assert np.array_equal(whole.logits, stepwise.logits)
    whole.decode(5)
    stepwise.decode(5)
    assert np.array_equal(whole.logits, stepwise.logits)


def test_snapshot_restore_continue_equals_never_stopped(model_path):
    engine = _engine(model_path)
    tokens = _tokens(40, seed=3)
    straight = engine.session()
    straight.prefill(tokens)

    session = engine.session()
    session.prefill(tokens[:25])
    snap = session.snapshot()
    session.prefill(_tokens(10, seed=99))  # wander off
    session.restore(snap)
    assert session.n_past == 25 and session.tokens == tokens[:25]
    session.prefill(tokens[25:])
    assert np.array_equal(session.logits, straight.logits)

    # The same snapshot restores again, into another session of the engine.
    other = engine.session()
    other.restore(snap)
    other.prefill(tokens[25:])
    assert np.array_equal(other.logits, straight.logits)


def test_restore_brings_back_the_retained_logits(model_path):
    engine = _engine(model_path)
    session = engine.session()
    session.prefill(_tokens(12, seed=4))
    before = session.logits
    snap = session.snapshot()
    session.decode(1)
    session.restore(snap)
    assert np.array_equal(session.logits, before)


def test_truncate_then_decode_equals_fresh_session(model_path):
    engine = _engine(model_path)
    tokens = _tokens(50, seed=5)
    session = engine.session()
    session.prefill(tokens)
    session.truncate(30)
    fresh = engine.session()
    fresh.prefill(tokens[:30])
    assert session.tokens == tokens[:30] and session.n_past == 30
    assert np.array_equal(session.logits, fresh.logits)
    session.decode(tokens[30])
    fresh.decode(tokens[30])
    assert np.array_equal(session.logits, fresh.logits)


def test_truncate_to_zero_empties_the_session(model_path):
    engine = _engine(model_path)
    session = engine.session()
    session.prefill(_tokens(10, seed=6))
    session.truncate(0)
    assert session.n_past == 0 and session.tokens == [] and session.logits is None
    session.decode(3)
    fresh = engine.session()
    fresh.decode(3)
    assert np.array_equal(session.logits, fresh.logits)


def test_truncate_behind_the_ring_rebuilds_bitwise(tiny_model):
    # After 650 positions the ring (527 rows) no longer holds what position
    # 100 needs; truncate rebuilds from the history, with identical bits.
    path = tiny_model("gemma3", "Q4_K", seed=5, context_length=1024)
    engine = _engine(path)
    tokens = _tokens(650, seed=7)
    session = engine.session(max_context=1024)
    session.prefill(tokens)
    session.truncate(100)
    fresh = engine.session(max_context=1024)
    fresh.prefill(tokens[:100])
    assert np.array_equal(session.logits, fresh.logits)
    session.prefill(tokens[100:140])
    fresh.prefill(tokens[100:140])
    assert np.array_equal(session.logits, fresh.logits)


def test_sessions_of_one_engine_do_not_interfere(model_path):
    engine = _engine(model_path)
    a, b = engine.session(), engine.session()
    tokens_a, tokens_b = _tokens(20, seed=8), _tokens(20, seed=9)
    for ta, tb in zip(tokens_a, tokens_b):
        a.decode(ta)
        b.decode(tb)
    alone = engine.session()
    alone.prefill(tokens_a)
    assert np.array_equal(a.logits, alone.logits)



def test_a_shape_class_is_recorded_once_and_replayed(tiny_model):
    engine = _engine(tiny_model("llama", "Q4_0", seed=3, context_length=1024))
    session = engine.session()
    session.prefill(_tokens(20))  # one 20-row graph with one output row
    built = engine._core._graphs_built
    for token in _tokens(30, seed=1):
        session.decode(token)  # the one-row decode graph, recorded once
    assert engine._core._graphs_built == built + 1
    others = [engine.session() for _ in range(3)]
    for other in others:
        other.prefill(_tokens(20, seed=2))  # the same 20-row class again: replayed
    assert engine._core._graphs_built == built + 1
    engine.decode_group([session, *others], [1, 2, 3, 4])  # a 4-row group: one more class
    assert engine._core._graphs_built == built + 2
