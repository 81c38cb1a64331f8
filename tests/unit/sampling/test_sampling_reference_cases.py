"""The 65 sampler cases from llama.cpp's sampling tests must all pass.

Each case is applied as the fixture's ``how_checked`` says: logits = logf(probs),
apply the sampler, then (except for xtc and typical) the final draw with seed 0,
and compare the candidates' probabilities in array order within 1e-5. The
"sampler_queue" cases carry no table: they check sizes and the first/last ids
with the arithmetic model of llama.cpp's test, restated below.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from muser.sampling import (
    Candidates,
    Distribution,
    Dry,
    MinP,
    Penalties,
    Temperature,
    TopK,
    TopNSigma,
    TopP,
    Typical,
    Xtc,
)

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "sampling" / "sampling-cases.json"
CASES = json.loads(FIXTURE.read_text())["cases"]
TOLERANCE = 1e-5


def case_id(case: dict) -> str:
    params = {k: v for k, v in case.items() if k not in ("sampler", "probs", "expected", "last_tokens")}
    return f"{case['sampler']}-" + "-".join(f"{k}={v}" for k, v in params.items())


def logf(values) -> np.ndarray:
    """C's logf on float32 inputs (rounded once to float32); log(0) = -inf."""
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(values, dtype=np.float32).astype(np.float64)).astype(np.float32)


def sampler_for(case: dict):
    kind = case["sampler"]
    if kind == "temp":
        return Temperature(case["temp"])
    if kind == "temp_ext":
        return Temperature(case["temp"], case["delta"], case["exponent"])
    if kind == "top_k":
        return TopK(case["k"])
    if kind == "top_p":
        return TopP(case["p"], min_keep=0)
    if kind == "min_p":
        return MinP(case["p"], min_keep=0)
    if kind == "xtc":
        return Xtc(case["p"], case["t"], min_keep=0, seed=0)
    if kind == "typical":
        return Typical(case["p"], min_keep=0)
    if kind == "top_n_sigma":
        return TopNSigma(case["n"])
    if kind == "penalties":
        penalties = Penalties(
            len(case["last_tokens"]), case["repeat_penalty"], case["alpha_frequency"], case["alpha_presence"]
        )
        for token in case["last_tokens"]:
            penalties.accept(token)
        return penalties
    if kind == "dry":
        breakers: dict[int, list[tuple[int, ...]]] = {}
        for breaker in case["seq_breakers"]:
            breakers.setdefault(breaker[0], []).append(tuple(breaker[1:]))
        dry = Dry(
            case["dry_multiplier"],
            case["dry_base"],
            case["dry_allowed_length"],
            case["dry_penalty_last_n"],
            breakers,
            context_size=1024,
        )
        for token in case["last_tokens"]:
            dry.accept(token)
        return dry
    raise AssertionError(f"unknown sampler kind {kind}")


TABLE_CASES = [c for c in CASES if c["sampler"] != "sampler_queue"]
QUEUE_CASES = [c for c in CASES if c["sampler"] == "sampler_queue"]


def test_fixture_holds_all_65_cases():
    assert len(CASES) == 65
    assert len(TABLE_CASES) + len(QUEUE_CASES) == 65


@pytest.mark.parametrize("case", TABLE_CASES, ids=[case_id(c) for c in TABLE_CASES])
def test_sampler_reproduces_llama_cpp_probability_table(case):
    candidates = Candidates.from_logits(logf(case["probs"]))
    candidates.probs = np.asarray(case["probs"], dtype=np.float32)  # llama.cpp's tester starts with p = probs
    sampler_for(case).apply(candidates)
    if case["sampler"] not in ("xtc", "typical"):
        Distribution(seed=0).apply(candidates)
    assert candidates.probs is not None
    assert len(candidates) == len(case["expected"])
    np.testing.assert_allclose(candidates.probs, case["expected"], rtol=0, atol=TOLERANCE)


class QueueModel:
    """llama.cpp's test model of a sampler queue over logits log(i) (token 0: -inf).

    ``expect(step, size)`` gives (expected size, first id, last id) after a step,
    where ``size`` is the candidate count after that step, as the C++ test
    computes it (so the size checks are partly bounds, not exact values).
    """

    def __init__(self, n_vocab: int, top_k: int, top_p: float, min_p: float) -> None:
        self.n_vocab, self.top_k, self.top_p, self.min_p = n_vocab, top_k, top_p, min_p
        self.min_token_id = 0

    def expect(self, step: str, size: int) -> tuple[int, int, int]:
        f32 = np.float32
        n_vocab = self.n_vocab
        if step == "k":
            expected = min(size, self.top_k)
            self.min_token_id = max(self.min_token_id, n_vocab - self.top_k)
        elif step == "p":
            low = self.min_token_id
            divisor = n_vocab * (n_vocab - 1) // 2 - low * (low - 1) // 2
            target = math.ceil(f32(f32(self.top_p) * f32(divisor)))
            self.min_token_id = n_vocab
            expected = 0
            cumsum = 0
            while True:  # at least one token is always kept
                self.min_token_id -= 1
                expected += 1
                cumsum += self.min_token_id
                if cumsum >= target:
                    break
            if self.min_token_id == 1:  # token 0 has p == 0
                self.min_token_id -= 1
                expected += 1
        else:
            expected = math.ceil(f32(f32(1.0) - f32(self.min_p)) * f32(n_vocab))
            expected = min(max(expected, 1), size)
            low = math.floor(f32(f32(self.min_p) * f32(n_vocab)))
            self.min_token_id = min(max(low, 1, n_vocab - size), n_vocab - 1)
        return expected, n_vocab - 1, self.min_token_id


@pytest.mark.parametrize("case", QUEUE_CASES, ids=[case_id(c) for c in QUEUE_CASES])
def test_sampler_queue_keeps_the_sizes_and_ids_llama_cpp_expects(case):
    n_vocab = case["n_vocab"]
    candidates = Candidates.from_logits(logf(np.arange(n_vocab)))
    model = QueueModel(n_vocab, case["top_k"], case["top_p"], case["min_p"])
    for step in case["samplers"]:
        sampler = {"k": TopK(case["top_k"]), "p": TopP(case["top_p"], 1), "m": MinP(case["min_p"], 1)}[step]
        sampler.apply(candidates)
        Distribution(seed=0).apply(candidates)
        size, first_id, last_id = model.expect(step, len(candidates))
        assert len(candidates) == size, f"size after {step!r}"
        if step == "k" or candidates.sorted:
            assert candidates.ids[0] == first_id, f"first id after {step!r}"
            assert candidates.ids[size - 1] == last_id, f"last id after {step!r}"
