"""At temperature 0 with nothing that can move the argmax, the chain is just
greedy (the trimming samplers are skipped); the token is the same."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from muser.sampling import SamplingParams, make_sampler


@given(arrays(np.float32, st.integers(1, 300), elements=st.floats(-30, 30, width=32)))
def test_greedy_picks_the_lowest_id_among_the_highest_logits(logits):
    chain = make_sampler(SamplingParams(temperature=0.0), seed=1)
    assert chain.names == ("greedy",)
    assert chain.sample(logits) == int(np.argmax(logits))


def test_samplers_that_can_move_the_argmax_are_kept_at_temperature_zero():
    for params in (SamplingParams(temperature=0.0, repeat_penalty=1.3),
                   SamplingParams(temperature=0.0, dry_multiplier=0.8, dry_sequence_breakers=()),
                   SamplingParams(temperature=0.0, xtc_probability=0.5)):
        assert len(make_sampler(params, seed=1).names) > 1


def test_a_repetition_penalty_still_changes_the_greedy_token():
    logits = np.array([1.0, 2.0, 0.5], dtype=np.float32)
    chain = make_sampler(SamplingParams(temperature=0.0, repeat_penalty=4.0), seed=1)
    chain.accept(1)
    assert chain.sample(logits) == 0
