"""The exactness contract (DESIGN.md), bitwise, with np.array_equal:

- a row decoded alone equals the same row inside any decode group of 2..4,
  in any order;
- prefill in one call, in any split, token by token, or in 64-row chunks
  forced by a waiting decoder gives the same logits and the same greedy
  continuation;
- snapshot -> restore -> continue equals never having stopped.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import muser
from tests.fixtures.driving import greedy, random_prompt, run_in_threads
from tests.fixtures.tiny_models import write_tiny_model

TINY_MODELS = {
    "llama-q4_1": dict(arch="llama", weight_type="Q4_1"),
    "qwen2-f16": dict(arch="qwen2", weight_type="F16"),
    "qwen3-q8_0": dict(arch="qwen3", weight_type="Q8_0"),
    "gemma3-q4_k": dict(arch="gemma3", weight_type="Q4_K", sliding_window=16),
}


@pytest.fixture(scope="module", params=sorted(TINY_MODELS))
def engine(request, tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("models") / f"{request.param}.gguf", **TINY_MODELS[request.param])
    return muser.Engine(path, threads=2)


def _prompt(engine, seed: int, length: int) -> list[int]:
    return random_prompt(seed, length, engine.config["n_vocab"])




@settings(max_examples=8)
@given(data=st.data())
def test_a_row_in_any_decode_group_equals_the_row_decoded_alone(engine, data):
    n_sessions = data.draw(st.integers(2, 4), label="sessions")
    lengths = data.draw(st.lists(st.integers(1, 40), min_size=n_sessions, max_size=n_sessions), label="lengths")
    grouped = [engine.session(max_context=128) for _ in range(n_sessions)]
    alone = [engine.session(max_context=128) for _ in range(n_sessions)]
    for i, (g, a) in enumerate(zip(grouped, alone)):
        prompt = _prompt(engine, i, lengths[i])
        g.prefill(prompt)
        a.prefill(prompt)
    for _ in range(data.draw(st.integers(1, 4), label="steps")):
        order = data.draw(st.permutations(range(n_sessions)), label="order")
        cut = data.draw(st.integers(1, n_sessions), label="cut")
        for group in (order[:cut], order[cut:]):
            if not group:
                continue
            tokens = [int(np.argmax(alone[i].logits)) for i in group]
            engine.decode_group([grouped[i] for i in group], tokens)
            for i, token in zip(group, tokens):
                alone[i].decode(token)
        for g, a in zip(grouped, alone):
            assert np.array_equal(g.logits, a.logits)
            assert g.tokens == a.tokens


@settings(max_examples=8)
@given(splits=st.lists(st.integers(1, 60), min_size=1, max_size=4))
def test_prefill_in_any_split_gives_the_same_logits_and_greedy_tokens(engine, splits):
    prompt = _prompt(engine, 7, sum(splits))
    whole = engine.session(max_context=256)
    whole.prefill(prompt)
    pieces = engine.session(max_context=256)
    at = 0
    for size in splits:
        pieces.prefill(prompt[at:at + size])
        at += size
    assert np.array_equal(whole.logits, pieces.logits)
    assert greedy(whole, 5) == greedy(pieces, 5)
    assert np.array_equal(whole.logits, pieces.logits)


def test_prefill_equals_token_by_token_decoding(engine):
    prompt = _prompt(engine, 3, 70)
    whole = engine.session(max_context=128)
    whole.prefill(prompt)
    stepwise = engine.session(max_context=128)
    for token in prompt:
        stepwise.decode(token)
    assert np.array_equal(whole.logits, stepwise.logits)


def test_prefill_chunks_shrink_to_64_rows_while_a_decoder_waits_and_logits_stay_bitwise_equal(engine):
    prompt = _prompt(engine, 11, 230)
    quiet = engine.session(max_context=256)
    quiet.prefill(prompt)
    before = engine.scheduler_stats()["prefill_grants"]
    quiet_chunks = 1  # 230 rows fit one 512-row chunk

    busy = engine.session(max_context=256)
    decoder = engine.session(max_context=256)
    decoder.prefill(prompt[:5])
    stop = threading.Event()

    def hammer():
        while not stop.is_set() and decoder.n_past < 250:
            decoder.decode(1)

    thread = threading.Thread(target=hammer)
    thread.start()
    while decoder.n_past < 8:  # the decoder is running before the prefill starts
        pass
    try:
        busy.prefill(prompt)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert np.array_equal(quiet.logits, busy.logits)
    # The decoder kept the accelerator busy, so the busy prefill was cut into
    # more chunks than the quiet one (64 rows each once a decoder waited).
    busy_chunks = engine.scheduler_stats()["prefill_grants"] - before - 1  # minus the decoder's own prefill
    assert busy_chunks >= quiet_chunks
    assert engine.scheduler_stats()["prefill_chunks_contended"] >= 1


def test_snapshot_restore_continue_equals_never_stopping(engine):
    prompt = _prompt(engine, 5, 30)
    straight = engine.session(max_context=128)
    straight.prefill(prompt)
    resumed = engine.session(max_context=128)
    resumed.prefill(prompt)
    snap = resumed.snapshot()
    greedy(resumed, 4)  # wander off, then come back
    resumed.restore(snap)
    assert greedy(straight, 8) == greedy(resumed, 8)
    assert np.array_equal(straight.logits, resumed.logits)


class TestDecodeGroupRejectsBadGroupsAndChangesNothing:
    def _sessions(self, engine, n):
        sessions = [engine.session(max_context=16) for _ in range(n)]
        for i, s in enumerate(sessions):
            s.prefill(_prompt(engine, i, 3))
        return sessions

    def _unchanged(self, sessions, before):
        for s, (tokens, logits) in zip(sessions, before):
            assert s.tokens == tokens and np.array_equal(s.logits, logits)

    @pytest.mark.parametrize("rows", [0, 5])
    def test_row_counts_outside_one_to_four(self, engine, rows):
        sessions = self._sessions(engine, 5)
        before = [(s.tokens, s.logits) for s in sessions]
        with pytest.raises(ValueError, match="1..4"):
            engine.decode_group(sessions[:rows], [1] * rows)
        self._unchanged(sessions, before)

    def test_a_repeated_session(self, engine):
        a, b = self._sessions(engine, 2)
        before = [(s.tokens, s.logits) for s in (a, b)]
        with pytest.raises(ValueError, match="more than once"):
            engine.decode_group([a, b, a], [1, 2, 3])
        self._unchanged((a, b), before)

    def test_a_session_of_another_engine(self, engine, tmp_path):
        other = muser.Engine(write_tiny_model(tmp_path / "other.gguf"), threads=1)
        a = self._sessions(engine, 1)[0]
        stranger = other.session(max_context=16)
        stranger.prefill([1, 2])
        with pytest.raises(ValueError, match="another engine"):
            engine.decode_group([a, stranger], [1, 2])
        assert a.n_past == 3 and stranger.n_past == 2

    def test_a_row_at_its_context_limit(self, engine):
        a, b = self._sessions(engine, 2)
        b.prefill(_prompt(engine, 9, 13))  # now at 16 == max_context
        before = [(s.tokens, s.logits) for s in (a, b)]
        with pytest.raises(muser.ContextOverflow):
            engine.decode_group([a, b], [1, 2])
        self._unchanged((a, b), before)

    def test_a_token_out_of_range(self, engine):
        a, b = self._sessions(engine, 2)
        before = [(s.tokens, s.logits) for s in (a, b)]
        with pytest.raises(ValueError, match="out of range"):
            engine.decode_group([a, b], [1, engine.config["n_vocab"]])
        self._unchanged((a, b), before)


def test_four_threads_each_driving_a_session_match_a_sequential_run(engine):
    prompts = [_prompt(engine, 100 + i, 8 + i) for i in range(4)]
    expected = []
    for prompt in prompts:
        s = engine.session(max_context=256)
        s.prefill(prompt)
        expected.append(greedy(s, 200))

    def run(i):
        s = engine.session(max_context=256)
        s.prefill(prompts[i])
        return greedy(s, 200)

    assert run_in_threads(run, 4) == expected


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    return muser.Engine(smollm2_path, threads=2)


@pytest.mark.slow
@pytest.mark.real_model
@settings(max_examples=3)
@given(data=st.data())
def test_smollm2_rows_in_decode_groups_equal_rows_decoded_alone(smollm2, data):
    test_a_row_in_any_decode_group_equals_the_row_decoded_alone.hypothesis.inner_test(smollm2, data)


@pytest.mark.slow
@pytest.mark.real_model
@settings(max_examples=3)
@given(splits=st.lists(st.integers(1, 60), min_size=2, max_size=4))
def test_smollm2_prefill_in_any_split_gives_the_same_logits_and_greedy_tokens(smollm2, splits):
    test_prefill_in_any_split_gives_the_same_logits_and_greedy_tokens.hypothesis.inner_test(smollm2, splits)
