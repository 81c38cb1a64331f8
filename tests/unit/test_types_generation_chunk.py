"""GenerationChunk and friends: validated, immutable results."""

from __future__ import annotations

import dataclasses
import math

import pytest

import muser
from muser.types import GenerationChunk, GenerationTimings, TokenLogprob


def test_chunk_is_exported_and_immutable():
    chunk = muser.GenerationChunk("hi", (5, 6))
    assert chunk.token_ids == (5, 6) and chunk.token == 6 and not chunk.finished
    with pytest.raises(dataclasses.FrozenInstanceError):
        chunk.text = "x"  # type: ignore[misc]


@pytest.mark.parametrize("reason", ["stop", "length", "cancelled", "error"])
def test_known_finish_reasons_mark_the_last_chunk(reason):
    assert GenerationChunk("", finish_reason=reason).finished


def test_unknown_finish_reason_is_rejected():
    with pytest.raises(ValueError, match="finish_reason"):
        GenerationChunk("", finish_reason="done")  # type: ignore[arg-type]


def test_logprobs_must_match_the_tokens():
    chunk = GenerationChunk(
        "a",
        [1, 2],
        logprobs=[-0.1, -2.0],
        top_logprobs=[[TokenLogprob(1, -0.1, "a")], [TokenLogprob(2, -2.0, ""), TokenLogprob(3, -2.5, "b")]],
    )
    assert chunk.logprobs == (-0.1, -2.0) and len(chunk.top_logprobs[1]) == 2
    with pytest.raises(ValueError, match="logprobs"):
        GenerationChunk("a", [1, 2], logprobs=[-0.1])
    with pytest.raises(ValueError, match="top_logprobs"):
        GenerationChunk("a", [1], top_logprobs=[])


def test_chunk_without_tokens_has_no_token():
    assert GenerationChunk("").token is None


def test_timings_rates():
    timings = GenerationTimings(prompt_tokens=100, prompt_ms=50.0, generated_tokens=20, generation_ms=400.0)
    assert timings.prompt_tokens_per_second == 2000.0
    assert timings.generated_tokens_per_second == 50.0
    assert math.isnan(GenerationTimings().generated_tokens_per_second)


def test_sampling_names_are_exported_from_the_package():
    assert muser.SamplingParams is muser.sampling.SamplingParams
    assert callable(muser.sampling.make_sampler)
