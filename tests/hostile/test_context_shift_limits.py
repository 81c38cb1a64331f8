"""Item 9: context_shift arguments are validated before the first token, and
every shift frees a minimum fraction of the context."""

from __future__ import annotations

import pytest

import muser
import muser.limits

MAX_CONTEXT = 32


@pytest.fixture()
def pool(tiny_model):
    engine = muser.Engine(tiny_model("llama", tokenizer="gpt2"), backend="null", threads=1)
    return muser.SlotPool(engine, slots=1, max_context=MAX_CONTEXT)


@pytest.mark.parametrize("n_keep", [-1, MAX_CONTEXT, MAX_CONTEXT + 5, MAX_CONTEXT - 2, MAX_CONTEXT // 2 + 1])
def test_bad_n_keep_is_refused_before_anything_streams(pool, n_keep):
    with pytest.raises(ValueError, match="n_keep"):
        muser.stream(pool, "hello there", max_tokens=100, context_shift=True, n_keep=n_keep)
    assert pool.stats()["context_shifts"] == 0
    assert pool.healthy


def test_every_shift_frees_at_least_the_minimum_fraction(pool):
    n_keep = MAX_CONTEXT // 2  # the largest allowed
    tokens = 200
    chunks = list(muser.stream(pool, "hello there", max_tokens=tokens, context_shift=True, n_keep=n_keep,
                               temperature=0, stop_token_ids=()))
    generated = sum(len(c.token_ids) for c in chunks)
    shifts = pool.stats()["context_shifts"]
    freed_per_shift = int(MAX_CONTEXT * muser.limits.MIN_SHIFT_FREED_FRACTION)
    assert shifts >= 1
    assert shifts <= generated // freed_per_shift + 1, (shifts, generated)


def test_n_keep_is_not_checked_against_the_context_without_context_shift(pool):
    assert isinstance(muser.generate(pool, "hi", max_tokens=2, n_keep=MAX_CONTEXT * 4), str)


def _full_context(pool) -> list[int]:
    ids = pool.engine.tokenize("hello there, general kenobi " * 20, add_special=False)
    return ids[:MAX_CONTEXT]


@pytest.mark.parametrize("n_keep", [-1, MAX_CONTEXT // 2 + 1, MAX_CONTEXT - 2, MAX_CONTEXT, 2**70])
def test_slot_context_shift_refuses_what_generation_refuses(pool, n_keep):
    prompt = _full_context(pool)
    with pool.acquire(prompt) as slot:
        slot.prefill(prompt)
        with pytest.raises(ValueError, match="n_keep") as raised:
            slot.context_shift(n_keep)
        if n_keep > 0:
            assert f"max_context // 2 = {MAX_CONTEXT // 2}" in str(raised.value)
        assert slot.tokens == prompt  # unchanged
    assert pool.stats()["context_shifts"] == 0


def test_slot_context_shift_frees_at_least_the_minimum_fraction(pool):
    prompt = _full_context(pool)
    with pool.acquire(prompt) as slot:
        slot.prefill(prompt)
        n_past = slot.context_shift(MAX_CONTEXT // 2)  # the largest allowed
        assert MAX_CONTEXT - n_past >= MAX_CONTEXT * muser.limits.MIN_SHIFT_FREED_FRACTION
        assert slot.tokens[:MAX_CONTEXT // 2] == prompt[:MAX_CONTEXT // 2]
    assert pool.stats()["context_shifts"] == 1


def test_slot_context_shift_cannot_keep_more_than_the_slot_holds(pool):
    prompt = _full_context(pool)[:5]
    with pool.acquire(prompt) as slot:
        slot.prefill(prompt)
        with pytest.raises(ValueError, match="n_past = 5"):
            slot.context_shift(6)
        assert slot.tokens == prompt
