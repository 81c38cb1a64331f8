"""Candidates and top_positions: exact top-k with ties broken by position, on any input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from muser.sampling import Candidates
from muser.sampling.candidates import top_positions


def reference_top(logits: np.ndarray, k: int) -> list[int]:
    order = np.lexsort((np.arange(logits.shape[0]), -logits.astype(np.float64)))
    return order[:k].tolist()


def masked(n: int, finite: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = np.full(n, -np.inf, dtype=np.float32)
    logits[rng.choice(n, finite, replace=False)] = rng.standard_normal(finite).astype(np.float32)
    return logits


ADVERSARIAL = {
    "real-like": (np.random.default_rng(0).standard_normal(262_144) * 3).astype(np.float32),
    "masked, few finite": masked(100_000, 48, 1),
    "masked, many finite": masked(100_000, 5_000, 2),
    "all equal": np.zeros(50_000, dtype=np.float32),
    "two values": np.where(np.arange(70_000) % 97 == 0, 1.0, -5.0).astype(np.float32),
    "ascending": np.arange(40_000, dtype=np.float32),
    "descending": -np.arange(40_000, dtype=np.float32),
    "sample-fooling": np.where(np.arange(65_536) % 16 == 0, 10.0, np.arange(65_536) % 7).astype(np.float32),
}


@pytest.mark.parametrize("k", [1, 40, 256, 4096])
@pytest.mark.parametrize("name", ADVERSARIAL)
def test_top_positions_equal_a_full_stable_sort(name, k):
    logits = ADVERSARIAL[name]
    assert top_positions(logits, k).tolist() == reference_top(logits, k)


@settings(max_examples=200, deadline=None)
@given(
    logits=hnp.arrays(
        np.float32,
        st.integers(1, 300),
        elements=st.sampled_from([-np.inf, -1.0, 0.0, 0.5, 2.0, 3.0]) | st.floats(-10, 10, width=32),
    ),
    k=st.integers(0, 320),
)
def test_top_positions_on_small_arrays_with_ties(logits, k):
    assert top_positions(logits, k).tolist() == reference_top(logits, k)


def test_from_logits_copies_and_starts_as_the_identity():
    logits = np.array([1.0, 2.0], dtype=np.float32)
    candidates = Candidates.from_logits(logits)
    candidates.logits[0] = 9.0
    assert logits[0] == 1.0
    assert candidates.is_identity and candidates.ids.tolist() == [0, 1] and candidates.n_vocab == 2


def test_positions_of_finds_tokens_in_any_order():
    candidates = Candidates.from_arrays([7, 3, 9, 1], [0, 0, 0, 0])
    positions, which = candidates.positions_of(np.array([9, 1, 5]))
    assert sorted(zip(positions.tolist(), which.tolist())) == [(2, 0), (3, 1)]
    identity = Candidates.from_logits(np.zeros(4, dtype=np.float32))
    positions, which = identity.positions_of(np.array([3, 8, -1, 0]))
    assert positions.tolist() == [3, 0] and which.tolist() == [0, 3]


def test_take_carries_probabilities_along():
    candidates = Candidates.from_logits(np.array([1.0, 3.0, 2.0], dtype=np.float32))
    candidates.softmax(sort=False)
    expected = candidates.probs[[1, 2]].copy()
    candidates.take(np.array([1, 2]), sorted=True)
    assert candidates.ids.tolist() == [1, 2]
    np.testing.assert_array_equal(candidates.probs, expected)


def test_softmax_sums_to_one_and_can_sort():
    candidates = Candidates.from_logits(np.array([0.0, 2.0, 1.0, -np.inf], dtype=np.float32))
    probs = candidates.softmax(sort=True)
    assert candidates.ids.tolist() == [1, 2, 0, 3]
    assert float(probs.sum()) == pytest.approx(1.0) and probs[-1] == 0.0


def test_selected_id_before_a_choice_is_an_error():
    with pytest.raises(ValueError):
        _ = Candidates.from_logits(np.zeros(2, dtype=np.float32)).selected_id


def test_from_arrays_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        Candidates.from_arrays([1, 2], [0.0])
