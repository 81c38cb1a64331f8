"""Items 5, 7 and 8: every public function refuses bad arguments with
ValueError/TypeError and a message in words, before any work starts; seeds are
32-bit and never silently cut; timeouts of any size or kind behave."""

from __future__ import annotations

import math
import threading

import pytest

import muser
import muser.limits


@pytest.fixture(scope="module")
def engine(tiny_model):
    return muser.Engine(tiny_model("llama", tokenizer="gpt2"), backend="null", threads=1)


@pytest.fixture(scope="module")
def pool(engine):
    return muser.SlotPool(engine, slots=1, max_context=64)


BIG = 2**70

# (description, call(engine, pool), expected type, message pattern)
CASES = [
    ("token id >= 2**63 in a prompt", lambda e, p: muser.generate(p, [2**63], max_tokens=1), ValueError, "token id"),
    ("negative token id in a prompt", lambda e, p: muser.generate(p, [-1], max_tokens=1), ValueError, "token id"),
    ("token id past the vocabulary", lambda e, p: muser.generate(p, [e.n_vocab], max_tokens=1), ValueError, "token id"),
    ("float token id", lambda e, p: muser.generate(p, [1.0], max_tokens=1), TypeError, "token id"),
    ("bytes prompt", lambda e, p: muser.generate(p, b"hello", max_tokens=1), TypeError, "prompt must be str"),
    ("bytes to tokenize", lambda e, p: e.tokenize(b"hello"), TypeError, "decode it first"),
    ("None to tokenize", lambda e, p: e.tokenize(None), TypeError, "must be str"),
    ("detokenize 2**63", lambda e, p: e.detokenize([2**63]), ValueError, "token id"),
    ("detokenize a str", lambda e, p: e.detokenize("abc"), TypeError, "sequence of token ids"),
    ("prefill 2**63", lambda e, p: e.session().prefill([2**63]), ValueError, "token id"),
    ("decode 2**64", lambda e, p: e.session().decode(2**64), ValueError, "token id"),
    ("decode_group 2**63", lambda e, p: e.decode_group([e.session()], [2**63]), ValueError, "token id"),
    ("acquire with 2**63", lambda e, p: p.acquire([2**63]), ValueError, "token id"),
    ("truncate 2**70", lambda e, p: e.session().truncate(BIG), ValueError, "n"),
    ("session max_context 2**70", lambda e, p: e.session(max_context=BIG), ValueError, "max_context"),
    ("logit_bias key 2**70", lambda e, p: muser.generate(p, "hi", max_tokens=1, logit_bias={BIG: 1.0}),
     ValueError, "logit_bias"),
    ("penalty_last_n 2**70", lambda e, p: muser.generate(p, "hi", max_tokens=1, penalty_last_n=BIG),
     ValueError, "penalty_last_n"),
    ("top_k 2**70", lambda e, p: muser.SamplingParams(top_k=BIG), ValueError, "top_k"),
    ("threads 5000", lambda e, p: muser.Engine(e.path, backend="null", threads=5000), ValueError, "threads"),
    ("threads 1.5", lambda e, p: muser.Engine(e.path, backend="null", threads=1.5), TypeError, "threads"),
    ("seed 1.5", lambda e, p: muser.generate(p, "hi", max_tokens=1, seed=1.5), TypeError, "seed"),
    ("seed 2**32", lambda e, p: muser.generate(p, "hi", max_tokens=1, seed=2**32), ValueError, "seed"),
    ("seed -1", lambda e, p: muser.generate(p, "hi", max_tokens=1, seed=-1), ValueError, "seed"),
    ("timeout NaN", lambda e, p: muser.generate(p, "hi", max_tokens=1, timeout=math.nan), ValueError, "timeout"),
    ("timeout -1", lambda e, p: muser.generate(p, "hi", max_tokens=1, timeout=-1), ValueError, "timeout"),
    ("timeout a str", lambda e, p: muser.generate(p, "hi", max_tokens=1, timeout="5"), TypeError, "timeout"),
    ("acquire timeout NaN", lambda e, p: p.acquire([1], timeout=math.nan), ValueError, "timeout"),
    ("consumer_timeout NaN", lambda e, p: muser.generate(p, "hi", max_tokens=1, consumer_timeout=math.nan),
     ValueError, "consumer_timeout"),
    ("batch_window_us 1e30", lambda e, p: muser.SlotPool(e, slots=2, batch_window_us=1e30),
     ValueError, "batch_window_us must be in"),
    ("batch_window_us NaN", lambda e, p: muser.SlotPool(e, slots=2, batch_window_us=math.nan),
     ValueError, "batch_window_us must be in"),
    ("max_waiting 2**70", lambda e, p: muser.SlotPool(e, slots=2, max_waiting=BIG), ValueError, "max_waiting"),
    ("max_tokens 1.5", lambda e, p: muser.generate(p, "hi", max_tokens=1.5), TypeError, "max_tokens"),
    ("stop 5", lambda e, p: muser.generate(p, "hi", max_tokens=1, stop=5), TypeError, "stop"),
    ("stop_token_ids 2**70 as str", lambda e, p: muser.generate(p, "hi", max_tokens=1, stop_token_ids="ab"),
     TypeError, "stop_token_ids"),
    ("n_keep -1", lambda e, p: muser.generate(p, "hi", max_tokens=1, context_shift=True, n_keep=-1),
     ValueError, "n_keep"),
    ("prompt over MAX_TEXT_CHARS", lambda e, p: muser.generate(p, "x" * (muser.limits.MAX_TEXT_CHARS + 1),
                                                               max_tokens=1), ValueError, "MAX_TEXT_CHARS"),
]


@pytest.mark.parametrize("description, call, expected, pattern", CASES, ids=[c[0] for c in CASES])
def test_bad_arguments_raise_documented_types_in_words(engine, pool, description, call, expected, pattern):
    with pytest.raises(expected, match=pattern) as info:
        call(engine, pool)
    assert "incompatible function arguments" not in str(info.value)
    assert pool.healthy


def test_text_limit_can_be_raised(engine, monkeypatch):
    monkeypatch.setattr(muser.limits, "MAX_TEXT_CHARS", 10)
    with pytest.raises(ValueError, match="MAX_TEXT_CHARS"):
        engine.tokenize("x" * 11)
    monkeypatch.setattr(muser.limits, "MAX_TEXT_CHARS", 11)
    assert engine.tokenize("x" * 11)


# ------------------------------------------------------------------ seeds (item 8)

def test_seeds_differing_by_2_to_the_32_are_not_silently_the_same(pool):
    with pytest.raises(ValueError, match="seed"):
        muser.generate(pool, "hi", max_tokens=8, seed=5 + 2**32, temperature=1.0)
    a = muser.generate(pool, "hi", max_tokens=8, seed=5, temperature=1.0)
    assert a == muser.generate(pool, "hi", max_tokens=8, seed=5, temperature=1.0)


def test_the_largest_seed_is_accepted(engine):
    two = muser.SlotPool(engine, slots=2, max_context=64)
    assert len(muser.generate(two, "hi", max_tokens=2, seed=muser.limits.MAX_SEED - 1, n=2)) == 2
    with pytest.raises(ValueError, match="seed"):
        muser.generate(two, "hi", max_tokens=2, seed=muser.limits.MAX_SEED, n=2)


# ------------------------------------------------------------------ timeouts (item 5)

@pytest.mark.parametrize("timeout", [math.inf, 9.3e9, 1e300])
def test_huge_timeouts_wait_instead_of_timing_out_at_once(engine, timeout):
    one = muser.SlotPool(engine, slots=1, max_context=64)
    held = one.acquire([1])
    outcome: list[object] = []

    def waiter():
        try:
            outcome.append(muser.generate(one, "hi", max_tokens=1, timeout=timeout))
        except BaseException as exc:  # recorded for the assertion below
            outcome.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive() and not outcome, f"timeout={timeout} returned at once: {outcome}"
    held.release()
    thread.join(30)
    assert outcome and isinstance(outcome[0], str)


@pytest.mark.parametrize("timeout", [math.inf, 1e12])
def test_huge_acquire_timeouts_wait_too(engine, timeout):
    one = muser.SlotPool(engine, slots=1, max_context=64)
    held = one.acquire([1])
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(one.acquire([2], timeout=timeout)))
    thread.start()
    thread.join(0.5)
    assert thread.is_alive() and not got
    held.release()
    thread.join(30)
    assert got
    got[0].release()


@pytest.mark.parametrize("timeout", [math.inf, 9.3e9])
def test_the_core_admission_treats_huge_timeouts_as_unbounded(timeout):
    # The compiled admission is also used on its own (property tests); it must
    # not overflow converting the timeout either.
    admission = muser._core.SlotAdmission(1, 4)
    first = admission.acquire()
    got: list[int] = []
    thread = threading.Thread(target=lambda: got.append(admission.acquire(timeout)))
    thread.start()
    thread.join(0.5)
    assert thread.is_alive() and not got
    admission.release(first)
    thread.join(30)
    assert got == [first]


def test_the_core_admission_refuses_a_nan_timeout():
    with pytest.raises(ValueError, match="timeout"):
        muser._core.SlotAdmission(1, 4).acquire(math.nan)


def test_a_lone_surrogate_is_a_value_error_in_words(engine, pool):
    with pytest.raises(ValueError, match="lone surrogate"):
        engine.tokenize("a\ud800b")
    with pytest.raises(ValueError, match="lone surrogate"):
        muser.generate(pool, "a\ud800b", max_tokens=1)
    assert not muser.Grammar('root ::= "a"').matches("\ud800")
