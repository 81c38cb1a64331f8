"""SamplingParams: llama.cpp's defaults, and a ValueError naming the field for bad values."""

from __future__ import annotations

import math

import pytest

from muser.sampling import DEFAULT_SAMPLER_ORDER, SamplingParams


def test_defaults_are_llama_cpp_defaults():
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.typical_p) == (0.8, 40, 0.95, 0.05, 1.0)
    assert (p.repeat_penalty, p.frequency_penalty, p.presence_penalty, p.penalty_last_n) == (1.0, 0.0, 0.0, 64)
    assert (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n) == (0.0, 1.75, 2, -1)
    assert p.dry_sequence_breakers == ("\n", ":", '"', "*")
    assert (p.xtc_probability, p.xtc_threshold, p.top_n_sigma) == (0.0, 0.1, -1.0)
    assert (p.mirostat, p.mirostat_tau, p.mirostat_eta, p.min_keep) == (0, 5.0, 0.1, 0)
    assert (p.dynatemp_range, p.dynatemp_exponent) == (0.0, 1.0)
    assert p.samplers == DEFAULT_SAMPLER_ORDER
    assert dict(p.logit_bias) == {}


BAD_VALUES = [
    ("temperature", -0.1),
    ("temperature", math.nan),
    ("temperature", math.inf),
    ("temperature", "hot"),
    ("top_k", -1),
    ("top_k", 2.5),
    ("top_k", True),
    ("top_p", 1.5),
    ("top_p", -0.1),
    ("min_p", 2.0),
    ("typical_p", -1.0),
    ("top_n_sigma", math.inf),
    ("xtc_probability", 1.1),
    ("xtc_threshold", -0.5),
    ("dynatemp_range", -1.0),
    ("dynatemp_exponent", -1.0),
    ("repeat_penalty", 0.0),
    ("frequency_penalty", math.inf),
    ("presence_penalty", math.nan),
    ("penalty_last_n", -2),
    ("dry_multiplier", -1.0),
    ("dry_base", 0.5),
    ("dry_allowed_length", -1),
    ("dry_penalty_last_n", -5),
    ("dry_sequence_breakers", "\n"),
    ("dry_sequence_breakers", ("",)),
    ("mirostat", 3),
    ("mirostat_tau", 0.0),
    ("mirostat_eta", -0.1),
    ("min_keep", -1),
    ("logit_bias", {-1: 1.0}),
    ("logit_bias", {"5": 1.0}),
    ("logit_bias", {5: math.inf}),
    ("logit_bias", {5: math.nan}),
    ("logit_bias", [(5, 1.0)]),
    ("samplers", ("top_k", "magic")),
    ("samplers", "top_k"),
]


@pytest.mark.parametrize(("field", "value"), BAD_VALUES, ids=[f"{f}={v!r}" for f, v in BAD_VALUES])
def test_invalid_value_raises_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"SamplingParams\.{field}\b"):
        SamplingParams(**{field: value})


def test_unknown_field_is_a_type_error():
    with pytest.raises(TypeError):
        SamplingParams(temprature=0.5)


def test_params_are_immutable_and_replace_validates():
    p = SamplingParams()
    with pytest.raises(AttributeError):
        p.top_k = 3  # type: ignore[misc]
    assert p.replace(top_k=3).top_k == 3
    with pytest.raises(ValueError, match="top_k"):
        p.replace(top_k=-3)


def test_logit_bias_is_copied_and_read_only():
    source = {1: 2.0}
    p = SamplingParams(logit_bias=source)
    source[2] = 3.0
    assert dict(p.logit_bias) == {1: 2.0}
    with pytest.raises(TypeError):
        p.logit_bias[3] = 1.0  # type: ignore[index]
    assert SamplingParams(logit_bias={4: -math.inf}).logit_bias[4] == -math.inf


def test_sequences_are_stored_as_tuples():
    p = SamplingParams(dry_sequence_breakers=["a"], samplers=["top_k", "temperature"])
    assert p.dry_sequence_breakers == ("a",) and p.samplers == ("top_k", "temperature")


def test_greedy_preset_has_zero_temperature():
    assert SamplingParams.greedy().temperature == 0.0
