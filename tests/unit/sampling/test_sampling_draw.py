"""Draw rules must match libstdc++'s <random> bit for bit (goldens made with g++)."""

from __future__ import annotations

import importlib.util
import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest

from muser.sampling import Mt19937
from muser.sampling import draw

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "stdlib_random"
GOLDENS = json.loads((GOLDEN_DIR / "std_random_goldens.json").read_text())


def double_bits(value: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", value))[0]


def float_bits(value: float) -> int:
    return int(np.float32(value).view(np.uint32))


def from_float_bits(bits: list[int]) -> np.ndarray:
    return np.array(bits, dtype=np.uint32).view(np.float32)


def test_canonical_double_matches_generate_canonical_for_scripted_words():
    mismatches = [
        r["words"] for r in GOLDENS["canon_d"] if double_bits(draw.canonical_double(*r["words"])) != r["double_bits"]
    ]
    assert mismatches == []
    assert all(r["words_used"] == 2 for r in GOLDENS["canon_d"])


def test_canonical_double_rounds_ties_to_even_and_stays_below_one():
    # w1 + w2 * 2^32 rounds once: a tie at 2^63 + 1024 goes down to even, + 3072 goes up.
    assert draw.canonical_double(1024, 0x80000000) == 0.5
    assert draw.canonical_double(3072, 0x80000000) == (2**63 + 4096) / 2**64
    assert draw.canonical_double(0xFFFFFFFF, 0xFFFFFFFF) == math.nextafter(1.0, 0.0)
    assert draw.canonical_double(0, 0) == 0.0


def test_canonical_float_matches_generate_canonical_for_scripted_words():
    mismatches = [r["word"] for r in GOLDENS["canon_f"] if float_bits(draw.canonical_float(r["word"])) != r["float_bits"]]
    assert mismatches == []
    assert draw.canonical_float(0xFFFFFFFF) == float(np.nextafter(np.float32(1), np.float32(0)))


@pytest.mark.parametrize("record", GOLDENS["uni_d"], ids=lambda r: f"seed={r['seed']}")
def test_uniform_double_draws_match_uniform_real_distribution(record):
    rng = Mt19937(record["seed"])
    assert [double_bits(draw.uniform_double(rng)) for _ in record["double_bits"]] == record["double_bits"]
    assert rng.next_u32() == record["next_raw"]  # two words per draw, no more


@pytest.mark.parametrize("record", GOLDENS["uni_f"], ids=lambda r: f"seed={r['seed']}")
def test_uniform_float_draws_match_uniform_real_distribution(record):
    rng = Mt19937(record["seed"])
    assert [float_bits(draw.uniform_float(rng)) for _ in record["float_bits"]] == record["float_bits"]
    assert rng.next_u32() == record["next_raw"]  # one word per draw


@pytest.mark.parametrize("record", GOLDENS["discrete"], ids=lambda r: f"n={len(r['weight_bits'])}")
def test_discrete_draws_match_std_discrete_distribution(record):
    weights = from_float_bits(record["weight_bits"])
    for expected in record["draws"]:
        rng = Mt19937(expected["seed"])
        assert [draw.discrete_draw(weights, rng) for _ in expected["picks"]] == expected["picks"]
        assert rng.next_u32() == expected["next_raw"]  # a single weight consumes nothing


@pytest.mark.parametrize("record", GOLDENS["dist_rule"], ids=lambda r: f"n={len(r['logit_bits'])}")
def test_softmax_draw_matches_the_cpp_rule_with_expf_and_double_sums(record):
    logits = from_float_bits(record["logit_bits"])
    for expected in record["draws"]:
        rng = Mt19937(expected["seed"])
        picks = []
        for _ in expected["picks"]:
            if logits.shape[0] < 2:
                picks.append(0)
                continue
            picks.append(draw.pick_by_running_sum(draw.unnormalized_probs(logits), draw.uniform_double(rng)))
        assert picks == expected["picks"]
        assert rng.next_u32() == expected["next_raw"]


def test_pick_by_running_sum_is_the_first_index_reaching_the_target():
    weights = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)  # running sums 1, 3, 6, 10
    assert draw.pick_by_running_sum(weights, 0.0) == 0
    assert draw.pick_by_running_sum(weights, 0.1) == 0  # target 1.0 reached exactly at index 0
    assert draw.pick_by_running_sum(weights, 0.1000001) == 1
    assert draw.pick_by_running_sum(weights, 0.6) == 2
    assert draw.pick_by_running_sum(weights, 0.99999) == 3


def test_pick_by_running_sum_skips_zero_weights_except_at_zero_target():
    weights = np.array([0.0, 0.0, 1.0, 0.0], dtype=np.float32)
    assert draw.pick_by_running_sum(weights, 0.5) == 2
    assert draw.pick_by_running_sum(weights, 0.999999) == 2


def test_pick_discrete_forces_the_last_running_sum_to_one():
    weights = np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
    assert draw.pick_discrete(weights, math.nextafter(1.0, 0.0)) == 3
    assert draw.pick_discrete(weights, 0.0) == 0
    assert draw.pick_discrete(np.array([5.0]), 0.9) == 0


def test_goldens_still_match_this_machines_libstdcxx():
    # the project builds C++ anyway, so g++ and libstdc++ are there
    spec = importlib.util.spec_from_file_location("make_goldens", GOLDEN_DIR / "make_std_random_goldens.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fresh = module.build_goldens()
    for kind in ("mt", "canon_d", "canon_f", "uni_d", "uni_f", "discrete", "dist_rule"):
        assert fresh[kind] == GOLDENS[kind], kind
