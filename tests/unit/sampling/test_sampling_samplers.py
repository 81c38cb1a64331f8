"""Each sampler against a probability table computed by hand (see the comments)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from muser.sampling import (
    Candidates,
    Distribution,
    Dry,
    Greedy,
    LogitBias,
    MinP,
    Mirostat,
    MirostatV2,
    Mt19937,
    Penalties,
    Temperature,
    TopK,
    TopNSigma,
    TopP,
    Typical,
    Xtc,
    dry_breakers_from_strings,
)
from muser.sampling.dry import reverse_z_lengths

LN = math.log


def from_probs(probs) -> Candidates:
    return Candidates.from_logits(np.log(np.asarray(probs, dtype=np.float64)).astype(np.float32))


def softmax(logits) -> list[float]:
    finite = [x for x in logits if x != -math.inf]
    top = max(finite)
    exps = [0.0 if x == -math.inf else math.exp(x - top) for x in logits]
    return [e / sum(exps) for e in exps]


def draw_probs(candidates: Candidates, seed: int = 0) -> np.ndarray:
    Distribution(seed).apply(candidates)
    return candidates.probs


# -- logit bias ----------------------------------------------------------------


def test_logit_bias_adds_to_listed_tokens_and_minus_inf_bans():
    # uniform logits; token 1 gets +ln 3 -> weight 3; token 3 banned -> 0
    candidates = Candidates.from_logits(np.zeros(4, dtype=np.float32))
    LogitBias({1: LN(3), 3: -math.inf}).apply(candidates)
    np.testing.assert_allclose(draw_probs(candidates), [0.2, 0.6, 0.2, 0.0], atol=1e-6)


def test_logit_bias_finds_tokens_by_id_after_reordering_and_ignores_unknown_ids():
    candidates = Candidates.from_arrays([3, 1, 0, 2], [0.0, 0.0, 0.0, 0.0])
    LogitBias({1: LN(3), 7: 5.0}).apply(candidates)
    np.testing.assert_allclose(candidates.logits, [0.0, LN(3), 0.0, 0.0], rtol=1e-6)


def test_logit_bias_rejects_negative_ids_and_nan_bias():
    with pytest.raises(ValueError):
        LogitBias({-1: 1.0})
    with pytest.raises(ValueError):
        LogitBias({1: math.nan})


# -- penalties -----------------------------------------------------------------


def test_penalties_divide_positive_multiply_negative_then_subtract_frequency_and_presence():
    # window [0, 1, 0]: token 0 seen twice, token 1 once.
    # token 0: 1.0 / 2 - (2 * 0.5 + 0.25) = -0.75 ; token 1: -1.0 * 2 - (0.5 + 0.25) = -2.75
    penalties = Penalties(last_n=8, repeat=2.0, frequency=0.5, presence=0.25)
    for token in (0, 1, 0):
        penalties.accept(token)
    candidates = Candidates.from_logits(np.array([1.0, -1.0, 2.0, 0.0], dtype=np.float32))
    penalties.apply(candidates)
    np.testing.assert_allclose(candidates.logits, [-0.75, -2.75, 2.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(draw_probs(candidates), softmax([-0.75, -2.75, 2.0, 0.0]), rtol=1e-5)


def test_penalty_window_forgets_tokens_older_than_last_n():
    penalties = Penalties(last_n=2, repeat=1.0, frequency=1.0, presence=0.0)
    for token in (0, 1, 2):  # window keeps [1, 2]
        penalties.accept(token)
    candidates = Candidates.from_logits(np.zeros(3, dtype=np.float32))
    penalties.apply(candidates)
    np.testing.assert_allclose(candidates.logits, [0.0, -1.0, -1.0])
    assert penalties.window == (1, 2)


def test_penalties_with_unbounded_window_remember_everything():
    penalties = Penalties(last_n=-1, repeat=1.0, frequency=1.0, presence=0.0)
    for token in [0] * 100:
        penalties.accept(token)
    candidates = Candidates.from_logits(np.zeros(2, dtype=np.float32))
    penalties.apply(candidates)
    np.testing.assert_allclose(candidates.logits, [-100.0, 0.0])


def test_penalties_are_a_no_op_when_neutral():
    penalties = Penalties(last_n=64, repeat=1.0, frequency=0.0, presence=0.0)
    penalties.accept(0)
    candidates = Candidates.from_logits(np.array([1.0, 2.0], dtype=np.float32))
    penalties.apply(candidates)
    np.testing.assert_array_equal(candidates.logits, [1.0, 2.0])


# -- DRY -------------------------------------------------------------------------


def test_reverse_z_lengths_counts_runs_equal_to_the_newest_run():
    # forward "a b c c b c y a b c" has repeat counts 0 0 3 1 0 2 0 0 0 0 (DRY's example);
    # read newest first, z[k] is the count at forward position n - 1 - k.
    newest_first = list("cbaycbccba")
    assert reverse_z_lengths(newest_first) == [0, 0, 0, 0, 2, 0, 1, 3, 0, 0]
    assert reverse_z_lengths([1, 2, 1, 2, 1]) == [0, 0, 3, 0, 1]


def test_dry_penalizes_the_token_that_would_extend_a_repeat():
    # history 5 6 7 8 5 6 7: emitting 8 would repeat "5 6 7 8"; current repeat length 3,
    # allowed 2 -> penalty = 1.0 * 2 ** (3 - 2) = 2 on token 8 only.
    dry = Dry(multiplier=1.0, base=2.0, allowed_length=2, penalty_last_n=-1)
    for token in (5, 6, 7, 8, 5, 6, 7):
        dry.accept(token)
    candidates = Candidates.from_logits(np.zeros(10, dtype=np.float32))
    dry.apply(candidates)
    expected = np.zeros(10, dtype=np.float32)
    expected[8] = -2.0
    np.testing.assert_allclose(candidates.logits, expected)


def test_dry_leaves_repeats_up_to_the_allowed_length_alone():
    dry = Dry(multiplier=1.0, base=2.0, allowed_length=3, penalty_last_n=-1)
    for token in (5, 6, 7, 5, 6):  # repeat length 2 < 3
        dry.accept(token)
    candidates = Candidates.from_logits(np.zeros(8, dtype=np.float32))
    dry.apply(candidates)
    np.testing.assert_array_equal(candidates.logits, np.zeros(8))


def test_dry_repeat_does_not_reach_back_past_a_breaker():
    # 1 2 3 4 9 1 2 3 with breaker 9 four tokens back: runs may be up to 4 long, so the
    # repeat "1 2 3" (length 3) counts: token 4 gets 2 ** (3 - 2) = 2.
    dry = Dry(1.0, 2.0, 2, -1, breakers={9: [()]})
    for token in (1, 2, 3, 4, 9, 1, 2, 3):
        dry.accept(token)
    candidates = Candidates.from_logits(np.zeros(10, dtype=np.float32))
    dry.apply(candidates)
    assert candidates.logits[4] == pytest.approx(-2.0)
    cut = Dry(1.0, 2.0, 2, -1, breakers={9: [()]})
    # 2 3 4 2 3 9 2: the breaker is 1 token back, so runs are capped at 1 < allowed 2
    for token in (2, 3, 4, 2, 3, 9, 2):
        cut.accept(token)
    candidates = Candidates.from_logits(np.zeros(10, dtype=np.float32))
    cut.apply(candidates)
    np.testing.assert_array_equal(candidates.logits, np.zeros(10))


def test_dry_never_penalizes_a_single_token_breaker():
    dry = Dry(1.0, 2.0, 2, -1, breakers={7: [()]})
    for token in (5, 6, 7, 5, 6):
        dry.accept(token)
    candidates = Candidates.from_logits(np.zeros(8, dtype=np.float32))
    dry.apply(candidates)
    np.testing.assert_array_equal(candidates.logits, np.zeros(8))


def test_dry_window_limits_how_far_back_repeats_are_found():
    dry = Dry(1.0, 2.0, 2, penalty_last_n=4)
    for token in (5, 6, 7, 0, 0, 5, 6):  # window [0, 0, 5, 6]: the earlier "5 6 7" is out
        dry.accept(token)
    candidates = Candidates.from_logits(np.zeros(8, dtype=np.float32))
    dry.apply(candidates)
    np.testing.assert_array_equal(candidates.logits, np.zeros(8))


def test_dry_breaker_strings_become_head_and_tail_token_sequences():
    pieces = [b"a", b"b:", b":", b"x\n", b"\n", b"end", b"e"]

    def tokenize(text: str) -> list[int]:
        return [pieces.index(ch.encode()) for ch in text]

    breakers = dry_breakers_from_strings(["\n", "nd"], pieces, tokenize)
    assert breakers[3] == [()] and breakers[4] == [()]  # contain "\n"
    assert breakers[5] == [()]  # "end" contains "nd"
    assert 0 not in breakers and 1 not in breakers


def test_dry_breaker_that_starts_at_a_token_end_gets_the_rest_as_tail():
    pieces = [b"ab", b"c", b"x"]

    def tokenize(text: str) -> list[int]:
        return [pieces.index(ch.encode()) for ch in text]

    breakers = dry_breakers_from_strings(["bc"], pieces, tokenize)
    assert breakers == {0: [(1,)]}  # "ab" ends with "b", the rest "c" is token 1


# -- top-k, top-p, min-p, typical, top-n-sigma ------------------------------------------


def test_top_k_keeps_the_k_most_likely_sorted():
    # logits 1 3 2 4, k = 2 -> ids 3, 1 with p = e^4/(e^4+e^3), e^3/(e^4+e^3)
    candidates = Candidates.from_logits(np.array([1.0, 3.0, 2.0, 4.0], dtype=np.float32))
    TopK(2).apply(candidates)
    assert candidates.ids.tolist() == [3, 1] and candidates.sorted
    np.testing.assert_allclose(draw_probs(candidates), [1 / (1 + math.e**-1), 1 / (1 + math.e)], rtol=1e-6)


def test_top_k_breaks_ties_by_position():
    candidates = Candidates.from_logits(np.array([1.0, 5.0, 5.0, 5.0], dtype=np.float32))
    TopK(2).apply(candidates)
    assert candidates.ids.tolist() == [1, 2]


def test_top_k_on_a_large_vocabulary_equals_a_full_sort():
    logits = np.random.default_rng(3).standard_normal(100_000).astype(np.float32)
    logits[::7] = 1.5  # many ties
    candidates = Candidates.from_logits(logits)
    TopK(500).apply(candidates)
    expected = np.lexsort((np.arange(logits.size), -logits))[:500]
    assert candidates.ids.tolist() == expected.tolist()


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    # 0.4 + 0.3 = 0.7 >= 0.5 -> keep 2, renormalized 4/7, 3/7
    candidates = from_probs([0.1, 0.2, 0.3, 0.4])
    TopP(0.5).apply(candidates)
    assert candidates.ids.tolist() == [3, 2]
    np.testing.assert_allclose(draw_probs(candidates), [4 / 7, 3 / 7], rtol=1e-6)


def test_top_p_respects_min_keep():
    candidates = from_probs([0.1, 0.2, 0.3, 0.4])
    TopP(0.5, min_keep=3).apply(candidates)
    np.testing.assert_allclose(draw_probs(candidates), [4 / 9, 3 / 9, 2 / 9], rtol=1e-6)


def test_top_p_on_a_large_vocabulary_equals_a_full_sort():
    logits = (np.random.default_rng(4).standard_normal(60_000) * 0.3).astype(np.float32)  # flat: needs many
    candidates = Candidates.from_logits(logits)
    TopP(0.9).apply(candidates)
    order = np.lexsort((np.arange(logits.size), -logits))
    probs = np.exp(logits.astype(np.float64) - logits.max())
    running = np.cumsum(probs[order] / probs.sum())
    expected_size = int(np.searchsorted(running, 0.9)) + 1
    assert abs(len(candidates) - expected_size) <= 1  # float32 vs float64 running sums
    assert candidates.ids.tolist() == order[: len(candidates)].tolist()


def test_min_p_keeps_tokens_at_least_p_times_the_top_in_original_order():
    # p = 0.5: threshold 0.2 -> keep 0.2, 0.3, 0.4 -> 2/9, 3/9, 4/9 (unsorted input keeps order)
    candidates = from_probs([0.1, 0.2, 0.3, 0.4])
    MinP(0.5).apply(candidates)
    assert candidates.ids.tolist() == [1, 2, 3] and not candidates.sorted
    np.testing.assert_allclose(draw_probs(candidates), [2 / 9, 3 / 9, 4 / 9], rtol=1e-6)


def test_min_p_on_sorted_input_keeps_a_sorted_prefix():
    candidates = from_probs([0.1, 0.2, 0.3, 0.4])
    TopK(4).apply(candidates)
    MinP(0.5).apply(candidates)
    assert candidates.ids.tolist() == [3, 2, 1]


def test_min_p_falls_back_to_min_keep_most_likely():
    # p = 0.9 keeps only 0.4; min_keep 2 -> the two most likely, 4/7 and 3/7
    candidates = from_probs([0.1, 0.2, 0.3, 0.4])
    MinP(0.9, min_keep=2).apply(candidates)
    assert candidates.ids.tolist() == [3, 2]
    np.testing.assert_allclose(draw_probs(candidates), [4 / 7, 3 / 7], rtol=1e-6)


def test_typical_keeps_tokens_closest_to_the_entropy():
    # p = 1/2, 1/4, 1/8, 1/8: H = 1.75 ln 2; |surprise - H| = ln 2 * (0.75, 0.25, 1.25, 1.25)
    # order by closeness: id 1 (0.25), id 0 (0.5) -> running 0.25, 0.75 > 0.5 -> keep [1, 0]
    candidates = from_probs([0.5, 0.25, 0.125, 0.125])
    Typical(0.5).apply(candidates)
    assert candidates.ids.tolist() == [1, 0]
    np.testing.assert_allclose(candidates.probs, [0.25, 0.5], rtol=1e-6)  # not renormalized


def test_top_n_sigma_keeps_logits_within_n_deviations_of_the_max():
    # finite logits 0 1 2 3: mean 1.5, std sqrt(1.25) = 1.118; cutoff 3 - 1.118 = 1.882
    candidates = Candidates.from_logits(np.array([0.0, 1.0, 2.0, 3.0, -np.inf], dtype=np.float32))
    TopNSigma(1.0).apply(candidates)
    np.testing.assert_allclose(draw_probs(candidates), [0, 0, 1 / (1 + math.e), 1 / (1 + math.e**-1), 0], atol=1e-6)


# -- XTC ----------------------------------------------------------------------


def test_xtc_removes_all_but_the_least_likely_top_choice():
    # threshold 0.2: 0.4, 0.3, 0.2 qualify -> drop 0.4 and 0.3, keep 0.2 and 0.1
    candidates = from_probs([0.4, 0.3, 0.2, 0.1])
    Xtc(probability=1.0, threshold=0.2, min_keep=0, seed=1).apply(candidates)
    assert candidates.ids.tolist() == [2, 3]
    np.testing.assert_allclose(candidates.probs, [0.2, 0.1], rtol=1e-6)


def test_xtc_acts_only_when_its_draw_is_below_the_probability():
    # seed 0's first word is 2357136044: chance = 2357136044 / 2^32 = 0.5488
    assert Mt19937(0).next_u32() == 2357136044
    kept = from_probs([0.4, 0.3, 0.2, 0.1])
    Xtc(probability=0.5, threshold=0.2, min_keep=0, seed=0).apply(kept)
    assert len(kept) == 4
    cut = from_probs([0.4, 0.3, 0.2, 0.1])
    Xtc(probability=0.55, threshold=0.2, min_keep=0, seed=0).apply(cut)
    assert len(cut) == 2


def test_disabled_xtc_draws_no_random_number():
    xtc = Xtc(probability=0.0, threshold=0.2, min_keep=0, seed=0)
    before = xtc.snapshot()
    xtc.apply(from_probs([0.4, 0.3, 0.2, 0.1]))
    assert xtc.snapshot() == before


# -- temperature --------------------------------------------------------------------


def test_temperature_divides_logits():
    candidates = Candidates.from_logits(np.array([1.0, 2.0, 3.0], dtype=np.float32))
    Temperature(0.5).apply(candidates)
    np.testing.assert_allclose(candidates.logits, [2.0, 4.0, 6.0])
    np.testing.assert_allclose(draw_probs(candidates), softmax([2.0, 4.0, 6.0]), rtol=1e-6)


def test_zero_temperature_keeps_only_the_first_maximum():
    candidates = Candidates.from_logits(np.array([1.0, 3.0, 3.0, 2.0], dtype=np.float32))
    Temperature(0.0).apply(candidates)
    np.testing.assert_allclose(draw_probs(candidates), [0, 1, 0, 0])


def test_dynamic_temperature_follows_normalized_entropy():
    # p = 0.75, 0.25: H = 0.5623, max H = ln 2 -> normalized 0.8113; t = 1, range 0.5:
    # temperature = 0.5 + 1.0 * 0.8113 = 1.3113 -> p ∝ (0.75, 0.25) ** (1 / 1.3113)
    entropy = -(0.75 * LN(0.75) + 0.25 * LN(0.25))
    temperature = 0.5 + 1.0 * (entropy / LN(2))
    weights = [0.75 ** (1 / temperature), 0.25 ** (1 / temperature)]
    candidates = from_probs([0.25, 0.75])
    Temperature(1.0, dynatemp_range=0.5, dynatemp_exponent=1.0).apply(candidates)
    assert candidates.ids.tolist() == [1, 0]  # the dynamic path sorts
    np.testing.assert_allclose(draw_probs(candidates), [w / sum(weights) for w in weights], rtol=1e-5)


# -- final choosers -----------------------------------------------------------------


def test_greedy_chooses_the_first_maximum():
    candidates = Candidates.from_logits(np.array([1.0, 5.0, 5.0, 2.0], dtype=np.float32))
    Greedy().apply(candidates)
    assert candidates.selected_id == 1


def test_distribution_picks_where_the_running_sum_reaches_the_draw():
    # seed 0: words 2357136044, 2546248239 -> u = 0.592845; running sums 0.1 0.3 0.6 1.0 -> index 2
    candidates = from_probs([0.1, 0.2, 0.3, 0.4])
    Distribution(0).apply(candidates)
    assert candidates.selected == 2
    np.testing.assert_allclose(candidates.probs, [0.1, 0.2, 0.3, 0.4], rtol=1e-6)


def test_distribution_with_one_candidate_draws_nothing():
    dist = Distribution(3)
    before = dist.snapshot()
    candidates = from_probs([0.5, 0.5])
    TopK(1).apply(candidates)
    dist.apply(candidates)
    assert candidates.selected == 0 and dist.snapshot() == before


def test_distribution_rejects_all_banned_candidates():
    with pytest.raises(ValueError, match="-inf"):
        Distribution(0).apply(Candidates.from_logits(np.full(3, -np.inf, dtype=np.float32)))


def test_distribution_frequencies_match_the_probabilities():
    # chi-square goodness of fit over 20,000 draws; 16.27 is the 0.1% critical value for 3 d.o.f.
    probs = [0.1, 0.2, 0.3, 0.4]
    logits = np.log(np.array(probs, dtype=np.float32))
    dist = Distribution(2024)
    counts = np.zeros(4)
    draws = 20_000
    for _ in range(draws):
        candidates = Candidates.from_logits(logits)
        dist.apply(candidates)
        counts[candidates.selected] += 1
    expected = np.array(probs) * draws
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert chi2 < 16.27, (counts, chi2)


# -- mirostat ----------------------------------------------------------------------


def test_mirostat_v2_keeps_tokens_with_surprise_at_most_mu_and_updates_mu():
    # tau 1 -> mu 2 bits: surprises 1, 2, 3, 3 -> keep 1/2, 1/4 -> renormalized 2/3, 1/3.
    # seed 0: u = 0.592845 <= 2/3 -> index 0; surprise log2(3/2) = 0.585;
    # mu = 2 - 0.1 * (0.585 - 1) = 2.0415
    mirostat = MirostatV2(tau=1.0, eta=0.1, seed=0)
    candidates = from_probs([0.5, 0.25, 0.125, 0.125])
    mirostat.apply(candidates)
    np.testing.assert_allclose(candidates.probs, [2 / 3, 1 / 3], rtol=1e-6)
    assert candidates.selected_id == 0
    assert float(mirostat.mu) == pytest.approx(2 - 0.1 * (math.log2(1.5) - 1), rel=1e-6)


def test_mirostat_v1_derives_k_from_the_zipf_exponent():
    # p_i ∝ 1 / i^1.5 over 1000 tokens: s_hat = 1.5 exactly, epsilon = 0.5;
    # tau 3 -> mu 6: k = (0.5 * 2^6 / (1 - 1000^-0.5)) ** (1 / 1.5) = 10.30 -> keep 10.
    ranks = np.arange(1, 1001, dtype=np.float64)
    candidates = from_probs(ranks**-1.5 / np.sum(ranks**-1.5))
    mirostat = Mirostat(tau=3.0, eta=0.1, seed=1, m=100)
    mirostat.apply(candidates)
    k = (0.5 * 2**6 / (1 - 1000**-0.5)) ** (1 / 1.5)
    assert len(candidates) == int(k) == 10
    assert 0 <= candidates.selected < 10
    surprise = -math.log2(candidates.probs[candidates.selected])
    assert float(mirostat.mu) == pytest.approx(6 - 0.1 * (surprise - 3), rel=1e-5)


def test_mirostat_reset_restores_mu_and_the_stream():
    mirostat = MirostatV2(tau=1.0, eta=0.5, seed=4)
    first = []
    for _ in range(5):
        candidates = from_probs([0.5, 0.25, 0.125, 0.125])
        mirostat.apply(candidates)
        first.append(candidates.selected_id)
    mirostat.reset()
    assert float(mirostat.mu) == 2.0
    again = []
    for _ in range(5):
        candidates = from_probs([0.5, 0.25, 0.125, 0.125])
        mirostat.apply(candidates)
        again.append(candidates.selected_id)
    assert again == first
