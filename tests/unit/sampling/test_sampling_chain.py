"""The sampler chain: llama.cpp's order, snapshot/restore, per-request seeds, grammar hook."""

from __future__ import annotations

import pickle
import zlib

import numpy as np
import pytest

from muser.errors import GrammarError
from muser.sampling import (
    Candidates,
    ChainSnapshot,
    Distribution,
    Greedy,
    GrammarConstraint,
    SamplerChain,
    SamplingParams,
    TopK,
    make_sampler,
)

N_VOCAB = 512


def toy_logits(history: list[int]) -> np.ndarray:
    """A deterministic stand-in for a model: logits depend on the last two tokens."""
    key = zlib.crc32(np.array(history[-2:], dtype=np.int64).tobytes())
    logits = np.random.default_rng(key).standard_normal(N_VOCAB).astype(np.float32) * 2.0
    logits[7] += 1.5  # a token the penalties will push down once repeated
    return logits


def generate(chain: SamplerChain, history: list[int], steps: int) -> list[int]:
    out = []
    for _ in range(steps):
        token = chain.sample(toy_logits(history + out))
        chain.accept(token)
        out.append(token)
    return out


EVERYTHING_ON = SamplingParams(
    temperature=1.1,
    top_k=0,
    top_p=0.97,
    min_p=0.01,
    xtc_probability=0.5,
    xtc_threshold=0.1,
    repeat_penalty=1.3,
    frequency_penalty=0.2,
    presence_penalty=0.1,
    penalty_last_n=16,
    dry_multiplier=0.8,
    dry_allowed_length=2,
    dry_penalty_last_n=32,
    dry_sequence_breakers=(),
    dynatemp_range=0.3,
    top_n_sigma=3.0,
    typical_p=0.99,
    logit_bias={3: -2.0},
)
PARAM_VARIANTS = {
    "everything-on": EVERYTHING_ON,
    "defaults": SamplingParams(),
    "mirostat-v1": SamplingParams(mirostat=1, mirostat_tau=4.0),
    "mirostat-v2": SamplingParams(mirostat=2, mirostat_tau=3.0),
    "greedy": SamplingParams(temperature=0.0, repeat_penalty=1.5),
}


def test_default_chain_follows_llama_cpp_order():
    chain = make_sampler(SamplingParams(), seed=1)
    assert chain.names == (
        "penalties", "dry", "top-n-sigma", "top-k", "typical", "top-p", "min-p", "xtc", "temp-ext", "dist",
    )


def test_logit_bias_runs_first_and_mirostat_replaces_the_truncation_chain():
    assert make_sampler(SamplingParams(logit_bias={1: 1.0}), seed=1).names[0] == "logit-bias"
    assert make_sampler(SamplingParams(mirostat=1), seed=1).names == ("temp-ext", "mirostat")
    assert make_sampler(SamplingParams(mirostat=2, logit_bias={1: 1.0}), seed=1).names == (
        "logit-bias", "temp-ext", "mirostat-v2",
    )


def test_custom_order_is_respected():
    chain = make_sampler(SamplingParams(samplers=("min_p", "temperature", "top_k")), seed=1)
    assert chain.names == ("min-p", "temp-ext", "top-k", "dist")


def test_zero_temperature_chooses_the_argmax_without_drawing():
    chain = make_sampler(SamplingParams(temperature=0.0), seed=1)
    assert isinstance(chain.samplers[-1], Greedy)
    logits = toy_logits([1, 2])
    assert chain.sample(logits) == int(np.argmax(logits))


def test_same_seed_same_tokens_different_seed_different_tokens():
    a = generate(make_sampler(EVERYTHING_ON, seed=7), [1, 2], 40)
    b = generate(make_sampler(EVERYTHING_ON, seed=7), [1, 2], 40)
    c = generate(make_sampler(EVERYTHING_ON, seed=8), [1, 2], 40)
    assert a == b
    assert a != c


@pytest.mark.parametrize("params", PARAM_VARIANTS.values(), ids=PARAM_VARIANTS.keys())
def test_restore_then_continue_equals_never_stopping(params):
    chain = make_sampler(params, seed=11)
    history = [1, 2]
    chain.accept_prompt(history)
    history += generate(chain, history, 25)
    snapshot = chain.snapshot()
    uninterrupted = generate(chain, history, 25)
    chain.restore(snapshot)
    assert generate(chain, history, 25) == uninterrupted
    fresh = make_sampler(params, seed=999)  # a different seed: everything comes from the snapshot
    fresh.restore(pickle.loads(pickle.dumps(snapshot)))
    assert generate(fresh, history, 25) == uninterrupted


def test_snapshot_captures_rng_streams_mu_and_windows():
    chain = make_sampler(EVERYTHING_ON, seed=3)
    generate(chain, [1], 5)
    snapshot = chain.snapshot()
    by_name = dict(zip(snapshot.names, snapshot.states))
    assert len(by_name["penalties"]) == 5
    assert len(by_name["dry"]) == 5
    assert by_name["xtc"] is not None and by_name["dist"] is not None
    miro = make_sampler(SamplingParams(mirostat=2), seed=3)
    generate(miro, [1], 3)
    mu, _stream = miro.snapshot().states[-1]
    assert mu != pytest.approx(2 * 5.0)


def test_restoring_a_snapshot_from_another_layout_fails_and_changes_nothing():
    chain = make_sampler(SamplingParams(), seed=5)
    generate(chain, [1], 3)
    before = chain.snapshot()
    other = make_sampler(SamplingParams(mirostat=2), seed=5).snapshot()
    with pytest.raises(ValueError):
        chain.restore(other)
    assert chain.snapshot() == before
    bad = ChainSnapshot(names=before.names, states=(("not a window",),) + before.states[1:])
    with pytest.raises(ValueError):
        chain.restore(bad)
    assert chain.snapshot() == before


def test_a_seeded_request_gets_the_same_tokens_alone_or_interleaved_with_others():
    alone = generate(make_sampler(EVERYTHING_ON, seed=21), [4], 30)
    mine = make_sampler(EVERYTHING_ON, seed=21)
    others = [make_sampler(EVERYTHING_ON, seed=s) for s in (21, 22, None)]
    out: list[int] = []
    other_histories: list[list[int]] = [[4], [5], [6]]
    for _ in range(30):
        for other, hist in zip(others, other_histories):  # other requests step in between
            token = other.sample(toy_logits(hist))
            other.accept(token)
            hist.append(token)
        token = mine.sample(toy_logits([4] + out))
        mine.accept(token)
        out.append(token)
    assert out == alone


def test_clone_continues_identically_and_independently():
    chain = make_sampler(EVERYTHING_ON, seed=2)
    generate(chain, [1], 10)
    twin = chain.clone()
    assert generate(twin, [9], 10) == generate(chain, [9], 10)
    generate(chain, [9], 1)
    assert twin.snapshot() != chain.snapshot()


def test_reset_starts_over_like_a_fresh_chain():
    chain = make_sampler(EVERYTHING_ON, seed=13)
    first = generate(chain, [1], 15)
    chain.reset()
    assert generate(chain, [1], 15) == first


def test_random_seed_is_recorded_and_reproduces_the_tokens():
    chain = make_sampler(EVERYTHING_ON)
    assert 0 <= chain.seed < 2**32
    tokens = generate(chain, [1], 10)
    assert generate(make_sampler(EVERYTHING_ON, seed=chain.seed), [1], 10) == tokens


def test_prompt_tokens_feed_the_penalty_window():
    chain = make_sampler(SamplingParams(temperature=0.0, repeat_penalty=1.0, presence_penalty=100.0), seed=1)
    logits = np.zeros(8, dtype=np.float32)
    logits[5] = 1.0
    assert chain.sample(logits) == 5
    chain.accept_prompt([5])
    assert chain.sample(logits) != 5


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, True])
def test_invalid_seed_is_rejected(seed):
    with pytest.raises(ValueError):
        make_sampler(SamplingParams(), seed=seed)


def test_chain_must_end_with_a_choosing_sampler():
    with pytest.raises(ValueError):
        SamplerChain([TopK(3)])
    with pytest.raises(ValueError):
        SamplerChain([])


def test_dry_breakers_need_a_vocabulary():
    with pytest.raises(ValueError, match="dry_sequence_breakers"):
        make_sampler(SamplingParams(dry_multiplier=0.8), seed=1)


def test_dry_breakers_are_built_from_the_vocabulary():
    class TinyVocab:
        pieces = [b"a", b"b", b"\n", b"c:"]

        def token_bytes(self, special: bool = False):
            return self.pieces

        def tokenize(self, text, add_special=True, parse_special=False):
            return [self.pieces.index(ch.encode()) for ch in text]

    chain = make_sampler(SamplingParams(dry_multiplier=0.8, dry_sequence_breakers=("\n", ":")), seed=1, vocab=TinyVocab())
    dry = chain.samplers[chain.names.index("dry")]
    assert dry.breakers == {2: ((),), 3: ((),)}


def test_malformed_logits_are_rejected():
    chain = make_sampler(SamplingParams(), seed=1)
    for bad in (np.array([1.0, np.nan]), np.array([np.inf, 0.0]), np.zeros((2, 2)), np.zeros(0)):
        with pytest.raises(ValueError):
            chain.sample(bad)


def test_last_candidates_hold_the_final_distribution():
    chain = make_sampler(SamplingParams(top_k=3), seed=1)
    token = chain.sample(np.array([0.0, 3.0, 1.0, 2.0, -1.0], dtype=np.float32))
    last = chain.last_candidates
    assert last is not None and last.ids.tolist() == [1, 3, 2]
    assert last.selected_id == token
    assert float(np.sum(last.probs)) == pytest.approx(1.0, abs=1e-6)


# -- grammar hook ----------------------------------------------------------------------


class EvenTokensOnly:
    """A fake grammar: only even token ids may come next."""

    def __init__(self) -> None:
        self.checked: list[int] = []
        self.masks = 0
        self.accepted: list[int] = []

    def check(self, token_id: int) -> bool:
        self.checked.append(token_id)
        return token_id % 2 == 0

    def apply(self, logits: np.ndarray) -> None:
        self.masks += 1
        logits[1::2] = -np.inf

    def accept(self, token_id: int) -> None:
        self.accepted.append(token_id)


def test_fake_grammar_satisfies_the_protocol():
    assert isinstance(EvenTokensOnly(), GrammarConstraint)


def test_grammar_is_checked_on_the_chosen_token_and_masks_only_on_rejection():
    grammar = EvenTokensOnly()
    chain = make_sampler(SamplingParams(temperature=0.0), seed=1, grammar=grammar)
    allowed = np.array([0.0, 1.0, 5.0, 2.0], dtype=np.float32)  # argmax 2 is even
    assert chain.sample(allowed) == 2
    assert grammar.checked == [2] and grammar.masks == 0
    rejected = np.array([0.0, 5.0, 1.0, 2.0], dtype=np.float32)  # argmax 1 is odd
    assert chain.sample(rejected) == 2
    assert grammar.checked == [2, 1] and grammar.masks == 1
    chain.accept(2)
    assert grammar.accepted == [2]


def test_resampling_after_rejection_redraws_from_the_masked_distribution():
    grammar = EvenTokensOnly()
    chain = make_sampler(SamplingParams(top_k=0, top_p=1.0, min_p=0.0), seed=5, grammar=grammar)
    logits = toy_logits([3])
    tokens = [chain.sample(logits) for _ in range(200)]
    assert all(t % 2 == 0 for t in tokens)
    assert grammar.masks > 0


def test_prompt_tokens_do_not_reach_the_grammar():
    grammar = EvenTokensOnly()
    chain = make_sampler(SamplingParams(), seed=1, grammar=grammar)
    chain.accept_prompt([1, 3, 5])
    assert grammar.accepted == []


def test_grammar_that_allows_nothing_raises_grammar_error():
    class Nothing(EvenTokensOnly):
        def check(self, token_id):
            return False

        def apply(self, logits):
            logits[:] = -np.inf

    chain = make_sampler(SamplingParams(), seed=1, grammar=Nothing())
    with pytest.raises(GrammarError):
        chain.sample(np.zeros(4, dtype=np.float32))


def test_object_without_the_grammar_methods_is_rejected():
    with pytest.raises(TypeError):
        SamplerChain([Distribution(0)], grammar=object())


def test_chain_apply_runs_samplers_in_order_on_given_candidates():
    chain = SamplerChain([TopK(2), Distribution(0)])
    candidates = Candidates.from_logits(np.array([1.0, 3.0, 2.0], dtype=np.float32))
    chain.apply(candidates)
    assert candidates.ids.tolist() == [1, 2] and candidates.selected in (0, 1)
