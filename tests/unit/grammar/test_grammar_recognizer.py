"""The Earley recognizer: byte-level operations, UTF-8 handling, clone/reset, bounded state."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from muser.grammar import Grammar


def allowed(state) -> set[int]:
    return set(np.flatnonzero(state.allowed_next_bytes()).tolist())


def test_rejected_input_leaves_the_state_where_it_was():
    st = Grammar('root ::= "abc" | "abd"').state()
    assert st.accept_bytes(b"ab")
    before = st.state_id
    assert not st.accept_bytes(b"cx")  # "c" alone would be fine: all or nothing
    assert st.state_id == before
    assert st.accept_bytes(b"d") and st.can_end()


def test_allowed_next_bytes_lists_exactly_the_bytes_that_can_follow():
    st = Grammar('root ::= [a-c] | "é" | "日"').state()
    assert allowed(st) == {ord("a"), ord("b"), ord("c"), 0xC3, 0xE6}
    assert st.accept_bytes(b"\xc3")
    assert allowed(st) == {0xA9}
    assert not st.can_end()  # in the middle of a character
    assert st.accept_bytes(b"\xa9")
    assert allowed(st) == set() and st.can_end()


def test_lead_bytes_that_cannot_complete_a_matching_character_are_not_allowed():
    # hiragana U+3041..U+309F is E3 81 81 .. E3 82 9F in UTF-8
    st = Grammar("root ::= [ぁ-ゟ]").state()
    assert allowed(st) == {0xE3}
    st.accept_bytes(b"\xe3")
    assert allowed(st) == {0x81, 0x82}
    st.accept_bytes(b"\x81")
    assert allowed(st) == set(range(0x81, 0xC0))


@pytest.mark.parametrize(
    "bad",
    [
        b"\xc0\x80",  # overlong NUL
        b"\xc1\xbf",  # overlong
        b"\xe0\x80\x80",  # overlong 3-byte
        b"\xed\xa0\x80",  # surrogate U+D800
        b"\xf0\x80\x80\x80",  # overlong 4-byte
        b"\xf4\x90\x80\x80",  # above U+10FFFF
        b"\xf5\x80\x80\x80",  # invalid lead
        b"\x80",  # stray continuation byte
        b"\xc3\x28",  # lead byte followed by ASCII
    ],
)
def test_invalid_utf8_is_rejected_even_by_the_any_character_class(bad):
    st = Grammar("root ::= .*").state()
    assert not st.accept_bytes(bad)


@pytest.mark.parametrize("text", ["aé日😀z", "😀😀", "ÿ\u07ff\u0800\uffff\U00010000\U0010ffff"])
def test_text_split_at_every_byte_boundary_is_recognized_the_same(text):
    g = Grammar("root ::= .*")
    data = text.encode("utf-8")
    for cut in range(len(data) + 1):
        st = g.state()
        assert st.accept_bytes(data[:cut]) and st.accept_bytes(data[cut:])
        assert st.can_end()
        # and can_end is false exactly while a character is unfinished
        mid = g.state()
        mid.accept_bytes(data[:cut])
        assert mid.can_end() == (not mid.in_partial_character())


def test_partial_character_state_survives_clone_and_resumes():
    g = Grammar('root ::= "日本"')
    st = g.state()
    st.accept_bytes("日".encode() + "本".encode()[:1])
    other = st.clone()
    assert other.in_partial_character()
    assert other.accept_bytes("本".encode()[1:]) and other.can_end()
    assert not st.can_end()  # the original did not move


def test_clone_is_independent_and_reset_restarts():
    g = Grammar('root ::= "ab"+')
    st = g.state()
    st.accept_bytes(b"ab")
    twin = st.clone()
    assert twin.accept_bytes(b"ab")
    assert st.state_id != twin.state_id or st.can_end() == twin.can_end()
    assert not st.accept_bytes(b"b")
    st.reset()
    assert not st.can_end()
    assert st.state_id == g.state().state_id
    assert st.accept_bytes(b"abab") and st.can_end()


def test_allowed_next_bytes_agrees_with_accept_bytes_for_every_byte():
    g = Grammar.json(any_value=True)
    prefixes = ["", "{", '{"k', '{"k": ', '{"k": [1', '{"k": [1.5e', '"\\u00', "tr", '"日']
    for prefix in prefixes:
        st = g.state()
        assert st.accept_bytes(prefix.encode())
        mask = st.allowed_next_bytes()
        for byte in range(256):
            assert st.would_accept(bytes([byte])) == bool(mask[byte]), (prefix, byte)


def test_byte_input_never_matches_token_terminals():
    g = Grammar("root ::= <[5]> | !<[5]>")
    st = g.state()
    assert not st.allowed_next_bytes().any()
    assert not st.accept_bytes(b"x")
    assert not g.matches("")


def test_accept_token_reads_the_token_through_token_terminals_or_its_bytes():
    g = Grammar('root ::= <[7]> "x" | "ab" "x" | !<[7]> "y"')
    terms = g.flat.token_terminals

    def matcher(index, token_id):
        return (token_id == terms[index].token_id) != terms[index].negated

    st = g.state()
    assert st.accept_token(7, b"<think>", matcher)
    assert allowed(st) == {ord("x")}
    # token 9 with bytes "ab": both readings survive, merged into one state
    st = g.state()
    assert st.accept_token(9, b"ab", matcher)
    assert allowed(st) == {ord("x"), ord("y")}
    # token 7 is excluded by !<[7]> and its bytes do not spell "ab"
    st = g.state()
    assert st.accept_token(7, b"zz", matcher)
    assert allowed(st) == {ord("x")}
    assert not g.state().accept_token(7, b"zz", None)  # no matcher: bytes only


def test_long_json_output_keeps_the_state_table_bounded():
    """Repetitive output revisits states: the table stops growing (see the benchmark for numbers)."""
    g = Grammar.json()
    st = g.state()
    element = {"id": 12, "name": "item", "tags": ["a", "b"], "price": 3.25, "ok": True, "note": None}
    assert st.accept_bytes(b'{"items": [')
    st.accept_bytes(json.dumps(element).encode())
    for _ in range(20):
        st.accept_bytes(b", " + json.dumps(element).encode())
    states_after_20 = st.automaton.state_count
    for _ in range(500):
        assert st.accept_bytes(b", " + json.dumps(element).encode())
    assert st.automaton.state_count == states_after_20
    assert states_after_20 < 1000
    assert st.accept_bytes(b"]}") and st.can_end()


def test_deep_nesting_grows_the_table_only_with_depth():
    g = Grammar.json(any_value=True)
    st = g.state()
    depth = 200
    assert st.accept_bytes(b"[" * depth + b"1" + b"]" * depth)
    assert st.can_end()
    assert st.automaton.state_count < 40 * depth


def test_right_recursion_costs_a_constant_number_of_states_per_repetition():
    g = Grammar('root ::= list\nlist ::= item "," list | item\nitem ::= [a-z]+')
    counts = []
    for n in (200, 400):
        st = Grammar(g.text).state()
        assert st.accept_bytes(",".join(["ab"] * n).encode()) and st.can_end()
        counts.append(st.automaton.state_count)
    per_item = (counts[1] - counts[0]) / 200
    assert per_item <= 4


def test_states_of_one_grammar_can_be_used_from_many_threads():
    g = Grammar.json()
    docs = [json.dumps({"k": i, "v": [i, str(i), {"x": i * 1.5}]}) for i in range(40)]
    bad = ['{"k": 1,}', '{"k" 1}', "[1]", '{"k": tru}']
    errors = []

    def worker(offset):
        try:
            for i in range(offset, len(docs), 4):
                assert g.matches(docs[i])
            for b in bad:
                assert not g.matches(b)
        except AssertionError as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
