"""Failure guarantee: a failed call (bad token id, context overflow, a fault
inside the forward) leaves tokens, n_past and logits exactly as they were,
and the session continues as if the call had never been made."""

from __future__ import annotations

import numpy as np
import pytest

import muser

N_VOCAB = 300


def _tokens(n: int, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, N_VOCAB, size=n)]


def _state(session: muser.Session):
    return session.tokens, session.n_past, session.logits


def _assert_unchanged(session: muser.Session, before) -> None:
    tokens, n_past, logits = before
    assert session.tokens == tokens
    assert session.n_past == n_past
    if logits is None:
        assert session.logits is None
    else:
        assert np.array_equal(session.logits, logits)


@pytest.fixture
def engine(tiny_model):
    return muser.Engine(tiny_model("gemma3", "Q8_0", seed=2, context_length=1024), threads=2)


@pytest.mark.parametrize("bad", [-1, N_VOCAB, 2**31, -(2**40)])
def test_out_of_range_token_in_prefill_changes_nothing(engine, bad):
    session = engine.session()
    session.prefill(_tokens(10))
    before = _state(session)
    with pytest.raises(ValueError, match="out of range"):
        session.prefill([1, 2, bad, 3])
    _assert_unchanged(session, before)


def test_out_of_range_token_in_decode_changes_nothing(engine):
    session = engine.session()
    before = _state(session)
    with pytest.raises(ValueError, match="token id 300"):
        session.decode(N_VOCAB)
    _assert_unchanged(session, before)


def test_non_integer_token_is_a_type_error(engine):
    session = engine.session()
    with pytest.raises(TypeError):
        session.decode(1.5)
    with pytest.raises(TypeError):
        session.prefill([1, "2"])
    assert session.n_past == 0


def test_context_overflow_changes_nothing(engine):
    session = engine.session(max_context=16)
    session.prefill(_tokens(10))
    before = _state(session)
    with pytest.raises(muser.ContextOverflow, match="max_context 16"):
        session.prefill(_tokens(7, seed=1))
    _assert_unchanged(session, before)
    session.prefill(_tokens(6, seed=1))  # exactly fills the context
    assert session.n_past == 16
    full = _state(session)
    with pytest.raises(muser.ContextOverflow):
        session.decode(1)
    _assert_unchanged(session, full)


def test_fault_inside_a_decode_changes_nothing_and_the_session_continues(engine):
    tokens = _tokens(30, seed=2)
    straight = engine.session()
    straight.prefill(tokens)

    session = engine.session()
    session.prefill(tokens[:29])
    before = _state(session)
    engine._core._arm_forward_fault(0, 3)  # the next forward fails after layer 3
    with pytest.raises(muser.InternalError, match="injected fault"):
        session.decode(tokens[29])
    _assert_unchanged(session, before)
    session.decode(tokens[29])
    assert np.array_equal(session.logits, straight.logits)


@pytest.mark.slow
def test_fault_in_a_later_prefill_chunk_changes_nothing_even_after_the_ring_moved(engine):
    # The first 512-row chunk succeeds and overwrites ring rows the session
    # still needs at n_past = 100; the second chunk fails. The session keeps
    # its state and rebuilds its KV from history on the next call.
    tokens = _tokens(800, seed=3)
    straight = engine.session(max_context=1024)
    straight.prefill(tokens[:100])
    straight.prefill(tokens[100:])

    session = engine.session(max_context=1024)
    session.prefill(tokens[:100])
    before = _state(session)
    engine._core._arm_forward_fault(1, 2)
    with pytest.raises(muser.InternalError):
        session.prefill(tokens[100:])
    _assert_unchanged(session, before)
    session.prefill(tokens[100:])
    assert np.array_equal(session.logits, straight.logits)


def test_fault_inside_truncate_changes_nothing(engine):
    session = engine.session()
    session.prefill(_tokens(20, seed=4))
    before = _state(session)
    engine._core._arm_forward_fault(0, 0)
    with pytest.raises(muser.InternalError):
        session.truncate(10)
    _assert_unchanged(session, before)
    session.truncate(10)
    assert session.n_past == 10


def test_truncate_past_the_end_is_rejected(engine):
    session = engine.session()
    session.prefill(_tokens(5))
    before = _state(session)
    with pytest.raises(ValueError, match="n <= n_past"):
        session.truncate(6)
    with pytest.raises(ValueError):
        session.truncate(-1)
    _assert_unchanged(session, before)


def test_snapshot_of_another_engine_or_context_is_rejected(engine, tiny_model):
    other = muser.Engine(tiny_model("llama", "F32", seed=1), threads=1)
    foreign = other.session()
    foreign.prefill([1, 2, 3])
    session = engine.session()
    session.prefill([4, 5])
    before = _state(session)
    with pytest.raises(ValueError, match="another engine"):
        session.restore(foreign.snapshot())
    with pytest.raises(ValueError):
        session.restore(engine.session(max_context=64).snapshot())
    _assert_unchanged(session, before)


def test_engine_and_session_arguments_are_validated(tiny_model):
    path = tiny_model("llama", "F32", seed=1)
    with pytest.raises(ValueError, match="threads"):
        muser.Engine(path, threads=0)
    with pytest.raises(ValueError, match="backend"):
        muser.Engine(path, backend="tpu")
    engine = muser.Engine(path, threads=1)
    with pytest.raises(ValueError, match="max_context"):
        engine.session(max_context=0)
    with pytest.raises(ValueError, match="training context"):
        engine.session(max_context=engine.config["context_length"] + 1)


def test_fault_inside_a_decode_group_changes_no_session(engine):
    sessions = [engine.session() for _ in range(3)]
    for i, s in enumerate(sessions):
        s.prefill(_tokens(5 + i, seed=i))
    before = [_state(s) for s in sessions]
    engine._core._arm_forward_fault(0, 1)
    with pytest.raises(muser.InternalError):
        engine.decode_group(sessions, [1, 2, 3])
    for s, state in zip(sessions, before):
        _assert_unchanged(s, state)
    engine.decode_group(sessions, [1, 2, 3])
    assert [s.n_past for s in sessions] == [6, 7, 8]
