"""Mt19937 must produce exactly what C++ std::mt19937 produces."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from muser.sampling import Mt19937, Mt19937State

GOLDENS = json.loads(
    (Path(__file__).resolve().parents[2] / "fixtures" / "stdlib_random" / "std_random_goldens.json").read_text()
)


def test_ten_thousandth_output_for_default_seed_is_the_value_the_cpp_standard_requires():
    stream = Mt19937(5489)
    stream.discard(9999)
    assert stream.next_u32() == 4123659995


def test_default_seed_is_5489_like_a_default_constructed_std_mt19937():
    assert Mt19937().next_u32() == Mt19937(5489).next_u32() == 3499211612


@pytest.mark.parametrize("record", GOLDENS["mt"], ids=lambda r: f"seed={r['seed']}")
def test_outputs_match_libstdcxx_for_seed(record):
    stream = Mt19937(record["seed"])
    assert [stream.next_u32() for _ in range(16)] == record["first16"]
    stream = Mt19937(record["seed"])
    stream.discard(9999)
    assert stream.next_u32() == record["output_10000"]


def test_array_draws_equal_single_draws():
    one_by_one = Mt19937(7)
    batch = Mt19937(7)
    assert batch.next_u32_array(1000).tolist() == [one_by_one.next_u32() for _ in range(1000)]
    assert batch.next_u32() == one_by_one.next_u32()


def test_restoring_a_state_replays_the_same_outputs_across_block_boundaries():
    stream = Mt19937(123)
    stream.discard(620)  # a few words before the 624-word block is regenerated
    state = stream.getstate()
    first = [stream.next_u32() for _ in range(1300)]
    stream.setstate(state)
    assert [stream.next_u32() for _ in range(1300)] == first


def test_state_transfers_between_streams_and_survives_pickling():
    source = Mt19937(99)
    source.discard(1000)
    target = Mt19937(1)
    target.setstate(pickle.loads(pickle.dumps(source.getstate())))
    assert [target.next_u32() for _ in range(10)] == [source.next_u32() for _ in range(10)]


def test_clone_is_independent_and_at_the_same_position():
    stream = Mt19937(5)
    stream.discard(3)
    twin = stream.clone()
    expected = [stream.next_u32() for _ in range(5)]
    assert [twin.next_u32() for _ in range(5)] == expected
    stream.next_u32()
    assert twin.getstate() != stream.getstate()


def test_reseeding_restarts_the_sequence():
    stream = Mt19937(42)
    first = [stream.next_u32() for _ in range(3)]
    stream.seed(42)
    assert [stream.next_u32() for _ in range(3)] == first


def test_state_is_a_value_equal_for_equal_positions():
    assert Mt19937(8).getstate() == Mt19937(8).getstate()
    assert Mt19937(8).getstate() != Mt19937(9).getstate()


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, "1", True])
def test_invalid_seed_is_rejected(seed):
    with pytest.raises((ValueError, TypeError)):
        Mt19937(seed)


def test_malformed_state_is_rejected():
    with pytest.raises(ValueError):
        Mt19937State(key=b"\x00" * 12, pos=0)
    with pytest.raises(ValueError):
        Mt19937State(key=b"\x00" * 2496, pos=625)
    with pytest.raises(TypeError):
        Mt19937().setstate(("not", "a state"))


def test_negative_counts_are_rejected():
    with pytest.raises(ValueError):
        Mt19937().discard(-1)
    with pytest.raises(ValueError):
        Mt19937().next_u32_array(-1)


def test_outputs_are_uniform_32_bit_words():
    words = Mt19937(2024).next_u32_array(200_000).astype(np.float64)
    assert words.min() >= 0 and words.max() < 2**32
    # mean of U[0, 2^32) is 2^31; the standard error here is about 0.13% of it
    assert abs(words.mean() / 2**31 - 1) < 0.01


def test_clone_before_the_first_draw_starts_from_the_seed():
    twin = Mt19937(77).clone()
    assert [twin.next_u32() for _ in range(3)] == [Mt19937(77).next_u32_array(3)[i] for i in range(3)]
