"""Token masks and the sampler-side GrammarConstraint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from grammar_test_vocab import greedy_tokenize, load_token_bytes, synthetic_vocab
from muser.errors import GrammarError
from muser.grammar import Grammar, GrammarConstraint, TokenTrie
from muser.grammar.token_mask import accepts_token, allowed_tokens

TOKENIZER_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "tokenizer"

# A small vocabulary with every single byte, multi-byte characters, pieces that
# stop inside a character, duplicates and an empty (control) token.
SMALL_VOCAB = [bytes([b]) for b in range(256)] + [
    b"true", b"false", b"null", b'{"', b'":', b'": ', b'",', b'"}', b", ", b"  ", b"\n  ",
    b"12", b"3.5", b"-1", b"e+", b"\\n", b"\\u00", b"abc", b" word", "日本".encode(),
    "日".encode()[:2], "本".encode()[1:], "é".encode(), b"\xf0\x9f", b"\x98\x80", b"",
    b"true",  # a duplicate of another token's bytes
]
EOG = len(SMALL_VOCAB)
SMALL_VOCAB.append(b"</s>")  # its bytes are text, but it is an end-of-generation id


def brute_force_mask(state, vocab):
    return np.array([bool(t) and state.would_accept(t) for t in vocab])


def states_along(grammar, text: str):
    """A fresh state after each prefix of `text` (every character boundary)."""
    out = []
    for k in range(len(text) + 1):
        st = grammar.state()
        assert st.accept_bytes(text[:k].encode())
        out.append(st)
    return out


# ------------------------------------------------------------------ the trie


def test_trie_maps_every_token_to_the_node_spelling_its_bytes():
    trie = TokenTrie(SMALL_VOCAB)
    for tid, data in enumerate(SMALL_VOCAB):
        node = 0
        for byte in data:
            lo = trie.child_start[node]
            kids = range(lo, lo + trie.child_count[node])
            node = next(k for k in kids if trie.node_byte[k] == byte)
        assert trie.token_node[tid] == (node if data else -1)
    dup_a, dup_b = SMALL_VOCAB.index(b"true"), len(SMALL_VOCAB) - 2
    assert trie.token_node[dup_a] == trie.token_node[dup_b]
    assert sorted(trie.tokens_at(np.array([trie.token_node[dup_a]]))) == [dup_a, dup_b]


def test_trie_is_cached_by_vocabulary_content():
    vocab = synthetic_vocab(1000, seed=3)
    first = TokenTrie.for_vocabulary(vocab)
    assert TokenTrie.for_vocabulary(vocab) is first  # same object
    assert TokenTrie.for_vocabulary(list(vocab)) is first  # equal content
    assert TokenTrie.for_vocabulary(vocab[:-1]) is not first


# ------------------------------------------------------------------ masks


@pytest.mark.parametrize(
    "grammar, text",
    [
        (Grammar.json(any_value=True), '{"a": [1, -2.5e3, "x\\n日"], "b": true}'),
        (Grammar('root ::= "日本" | "é"+ | [a-c]{2,3}'), "日本"),
        (Grammar("root ::= [😀-🙏] [ぁ-ゟ]*"), "😀ひ"),
    ],
    ids=["json", "multibyte", "ranges"],
)
def test_mask_equals_checking_every_token_by_itself(grammar, text):
    trie = TokenTrie(SMALL_VOCAB)
    for st in states_along(grammar, text):
        expected = brute_force_mask(st, SMALL_VOCAB)
        got = allowed_tokens(trie, st.automaton, st.state_id)
        assert np.array_equal(got, expected), np.flatnonzero(got != expected)
        for tid in range(len(SMALL_VOCAB)):
            assert accepts_token(trie, st.automaton, st.state_id, tid) == expected[tid]


def test_trie_methods_take_a_grammar_state():
    trie = TokenTrie(SMALL_VOCAB)
    st = Grammar('root ::= "tr" "ux"?').state()
    mask = trie.mask(st)
    assert mask[SMALL_VOCAB.index(b"t")] and not mask[SMALL_VOCAB.index(b"true")]
    st.accept_bytes(b"tr")
    assert trie.accepts_token(st, SMALL_VOCAB.index(b"u"))
    assert not trie.accepts_token(st, SMALL_VOCAB.index(b"e+"))


def test_tokens_ending_inside_a_character_are_allowed_when_it_can_complete():
    g = Grammar('root ::= "日本"')
    trie = TokenTrie(SMALL_VOCAB)
    mask = allowed_tokens(trie, g.state().automaton, g.state().state_id)
    assert mask[SMALL_VOCAB.index("日".encode()[:2])]
    assert mask[SMALL_VOCAB.index("日本".encode())]
    assert not mask[SMALL_VOCAB.index(b"\xf0\x9f")]


@pytest.fixture(scope="module")
def gpt2_vocab():
    return load_token_bytes(TOKENIZER_DIR / "ggml-vocab-gpt-2.gguf")


@pytest.fixture(scope="module")
def spm_vocab():
    return load_token_bytes(TOKENIZER_DIR / "ggml-vocab-llama-spm.gguf")


@pytest.mark.parametrize("vocab_name", ["gpt2_vocab", "spm_vocab"])
def test_mask_on_a_real_vocabulary_equals_checking_every_token(vocab_name, request):
    tokens, _ = request.getfixturevalue(vocab_name)
    trie = TokenTrie.for_vocabulary(tokens)
    g = Grammar.json()
    # dense (inside a string) and sparse (after a brace) walks, and a number
    for prefix in ['{"name": "Al', "{", '{"n": 12', '{"n": "日']:
        st = g.state()
        st.accept_bytes(prefix.encode())
        got = allowed_tokens(trie, st.automaton, st.state_id)
        check = np.array([accepts_token(trie, st.automaton, st.state_id, t) for t in range(len(tokens))])
        assert np.array_equal(got, check)
        sample = np.random.default_rng(0).choice(len(tokens), 300, replace=False)
        assert [bool(got[t]) for t in sample] == [bool(tokens[t]) and st.would_accept(tokens[t]) for t in sample]


# ------------------------------------------------------------------ constraint


def make_constraint(text='root ::= "ab" "c"*', vocab=SMALL_VOCAB, eog=(EOG,)):
    return GrammarConstraint(Grammar(text), vocab, eog)


def test_end_of_generation_is_allowed_exactly_where_the_grammar_can_end():
    gc = make_constraint()
    assert not gc.check(EOG) and not gc.mask()[EOG]
    gc.accept(SMALL_VOCAB.index(b"a"))
    assert not gc.can_end() and not gc.check(EOG)
    gc.accept(SMALL_VOCAB.index(b"b"))
    assert gc.can_end() and gc.check(EOG) and gc.mask()[EOG]
    gc.accept(EOG)
    assert gc.finished and not gc.mask().any() and not gc.check(SMALL_VOCAB.index(b"c"))
    with pytest.raises(GrammarError, match="already ended"):
        gc.accept(SMALL_VOCAB.index(b"c"))


def test_end_of_generation_text_is_never_read_as_bytes():
    # "</s>" would be fine text for this grammar; as an EOG id it only ends it
    gc = GrammarConstraint(Grammar("root ::= [<>/s]*"), SMALL_VOCAB, [EOG])
    gc.accept(SMALL_VOCAB.index(b"<"))
    assert gc.check(EOG)  # because the grammar can end here, not because of its bytes
    gc2 = GrammarConstraint(Grammar('root ::= "<" [<>/s]+'), SMALL_VOCAB, [EOG])
    gc2.accept(SMALL_VOCAB.index(b"<"))
    assert not gc2.check(EOG) and not gc2.mask()[EOG]


def test_check_agrees_with_mask_for_every_token():
    g = Grammar.json(any_value=True)
    gc = GrammarConstraint(g, SMALL_VOCAB, [EOG])
    for tok in greedy_tokenize(b'{"a": [12, "abc"]}', SMALL_VOCAB):
        mask = gc.mask()
        assert [gc.check(t) for t in range(len(SMALL_VOCAB))] == mask.tolist()
        gc.accept(tok)
    assert gc.can_end() and gc.mask()[EOG]


def test_rejected_accept_raises_and_leaves_the_constraint_unchanged():
    gc = make_constraint()
    gc.accept(SMALL_VOCAB.index(b"a"))
    before = gc.mask().copy()
    with pytest.raises(GrammarError, match="not allowed"):
        gc.accept(SMALL_VOCAB.index(b"x"))
    with pytest.raises(GrammarError, match="outside the vocabulary"):
        gc.accept(10_000)
    assert np.array_equal(gc.mask(), before)
    gc.accept(SMALL_VOCAB.index(b"b"))


def test_apply_sets_minus_infinity_exactly_where_the_mask_is_false():
    gc = make_constraint()
    logits = np.arange(len(SMALL_VOCAB) + 3, dtype=np.float32)  # 3 padding entries
    gc.apply(logits)
    mask = gc.mask()
    assert np.all(np.isneginf(logits[: len(SMALL_VOCAB)]) == ~mask)
    assert np.all(logits[: len(SMALL_VOCAB)][mask] == np.flatnonzero(mask))
    assert np.all(np.isneginf(logits[len(SMALL_VOCAB) :]))
    with pytest.raises(ValueError):
        gc.apply(np.zeros(5, dtype=np.float32))


def test_mask_is_read_only():
    with pytest.raises(ValueError):
        make_constraint().mask()[0] = True


def test_clone_and_reset_of_a_constraint():
    gc = make_constraint()
    gc.accept(SMALL_VOCAB.index(b"a"))
    twin = gc.clone()
    twin.accept(SMALL_VOCAB.index(b"b"))
    assert twin.can_end() and not gc.can_end()
    twin.accept(EOG)
    assert twin.finished and not gc.finished
    twin.reset()
    assert not twin.finished and twin.check(SMALL_VOCAB.index(b"a"))


def test_eog_id_outside_the_vocabulary_is_rejected():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        make_constraint(eog=(len(SMALL_VOCAB),))


# ------------------------------------------------------------------ token terminals


def test_token_id_terminals_allow_exactly_those_tokens():
    vocab = SMALL_VOCAB[:EOG] + [b"", b""]  # two control tokens (no text)
    think, end = EOG, EOG + 1
    g = Grammar(f"root ::= <[{think}]> (!<[{end}]>)* <[{end}]> [a-z]+")
    gc = GrammarConstraint(g, vocab, [0])
    assert np.flatnonzero(gc.mask()).tolist() == [think]
    gc.accept(think)
    mask = gc.mask()
    # any token (via !<[end]>, or `end` itself via <[end]>) except the EOG id,
    # which only can_end admits
    assert mask.sum() == len(vocab) - 1 and not mask[0] and mask[end] and mask[think]
    assert gc.check(end) and gc.check(think) and not gc.check(0)
    gc.accept(SMALL_VOCAB.index(b"abc"))
    gc.accept(end)
    assert not gc.can_end()
    assert np.flatnonzero(gc.mask()).tolist() == [t for t in range(len(vocab)) if vocab[t] and vocab[t].isalpha() and vocab[t].islower()]


def test_text_token_terminals_resolve_through_the_vocabulary():
    vocab = SMALL_VOCAB[:EOG] + [b"<think>"]
    think = len(vocab) - 1
    gc = GrammarConstraint(Grammar('root ::= <think> "x"'), vocab, [])
    assert np.flatnonzero(gc.mask()).tolist() == [think]
    gc.accept(think)
    assert gc.check(SMALL_VOCAB.index(b"x"))
    with pytest.raises(GrammarError, match="<nothing> is not a token"):
        GrammarConstraint(Grammar('root ::= <nothing> "x"'), vocab, [])
