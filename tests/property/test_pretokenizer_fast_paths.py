"""The pre-tokenizer's specialised scans find exactly the backtracking engine's matches.

`Regex::search` answers two kinds of pattern without the backtracking engine
(csrc/tokenizer/regex_matcher.cpp): GPT-2's split pattern (a scan over the
classes letter / number / whitespace / other) and patterns that are one set
(starcoder's ``\\p{N}``, deepseek's ``[\\r\\n]``). `_testing.regex_matches`
walks a text the way the pre-tokenizer walks a piece, through `search`
(general=False) or the engine alone (general=True); both must give the same
matches on any text and any [begin, end) piece of it, since the piece ends
are the text ends for the pattern's lookahead.
"""

from __future__ import annotations

import random
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muser import _core

T = _core._testing

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
SINGLE_SETS = [r"\p{N}", r"[\r\n]", r"\p{L}", r"[0-9]", r"\s"]
FAST = [GPT2, *SINGLE_SETS]
# Patterns that keep the engine (their matches are not decided by one symbol
# class), so the comparison below would compare the engine with itself.
GENERAL = [
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
    r"\s+$",
]

# Every kind of symbol the GPT-2 scan tells apart, and the ones that look
# alike to it: ASCII and non-ASCII letters (Latin, Greek, Cyrillic, Arabic,
# CJK, Hangul), combining marks (other, not letters), digits of several
# scripts and other numbers (superscripts, Roman numerals), every Unicode
# whitespace character, controls, punctuation, symbols, emoji (with ZWJ and
# variation selectors), private use and unassigned code points, and the
# pieces of contractions in both cases.
ALPHABET = list(
    "abzAZ09_'\"-.,!?;:()[]{}<>/\\@#$%^&*+=|~`"
    " \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000\x00\x1f\x7f"
    "éßÆΩжقש中日本語한글\u0301\u0308\u0651\u20dd٣३²½Ⅻ①"
    "😀🚀👍🏽\u200d\ufe0f\ue000\U000f0000\U00040000\U0010fffd\ufffd\u2581"
)
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll", "'r", "'l", "'v", "''", "'"]

TEXTS = st.lists(st.one_of(st.sampled_from(ALPHABET), st.sampled_from(CONTRACTIONS),
                           st.characters(exclude_categories=("Cs",)),
                           st.sampled_from([" " * 3, "\n\n", " \t ", "  a", " 7", " 'll", "a'sb"])),
                 max_size=60).map("".join)

SETTINGS = settings(max_examples=400, deadline=None, derandomize=True)


def assert_same(pattern: str, text: str, begin: int = 0, end: int = -1) -> None:
    fast = T.regex_matches(pattern, text, begin, end)
    general = T.regex_matches(pattern, text, begin, end, general=True)
    assert fast == general, f"{pattern!r} on {text!r}[{begin}:{end}]: scan {fast} != engine {general}"


def test_the_fast_paths_are_the_patterns_expected():
    # If a pattern silently lost its scan, the comparisons below would pass
    # while comparing the engine with itself.
    for pattern in FAST:
        assert T.regex_has_fast_path(pattern), pattern
    for pattern in GENERAL:
        assert not T.regex_has_fast_path(pattern), pattern


@pytest.mark.parametrize("pattern", FAST)
@SETTINGS
@given(text=TEXTS, data=st.data())
def test_scan_matches_engine_on_generated_text(pattern, text, data):
    assert_same(pattern, text)
    n = len(text)
    begin = data.draw(st.integers(0, n), label="begin")
    end = data.draw(st.integers(begin, n), label="end")
    assert_same(pattern, text, begin, end)


@pytest.mark.parametrize("pattern", FAST)
def test_scan_matches_engine_on_random_unicode(pattern):
    # The benchmark's kind of text (uniform over all code points but
    # surrogates), and every assigned character class in long runs.
    rng = random.Random(17)
    for length in (1, 2, 5, 50, 2_000):
        for _ in range(20):
            text = "".join(chr(rng.choice((rng.randrange(0x20, 0xD800), rng.randrange(0xE000, 0x110000))))
                           for _ in range(length))
            assert_same(pattern, text)
    by_category: dict[str, list[str]] = {}
    for cp in range(0x30000):
        if 0xD800 <= cp < 0xE000:
            continue
        by_category.setdefault(unicodedata.category(chr(cp)), []).append(chr(cp))
    for category, chars in sorted(by_category.items()):
        sample = rng.sample(chars, min(len(chars), 300))
        text = "".join(rng.choice(sample + [" ", "'", "a", "1", "\n"]) for _ in range(3_000))
        assert_same(pattern, text)


@pytest.mark.parametrize("pattern", FAST)
@pytest.mark.parametrize("text", [
    "", " ", "  ", "\n", " \n", "\n ", "a", " a", "  a", "a ", "a  ", " 1", "  1", " !", "  !", "\t!", "\t\t!",
    "'s", "'sa", "'S", "'re", "'r", "'", "''s", " 's", "a's", "it's", "they'll've", "'ll", "'l", "'lL",
    "x" * 5000, " " * 5000, " " * 5000 + "x", "\n" * 3000 + "a", "é\u0301" * 1000, "😀" * 1000, "7" * 5000,
    " \u00a0\u3000x", "\u3000\u3000", "a\u3000b", "\x85x", "  \u2028", "1a!b 2 c\t\td\n",
])
def test_scan_matches_engine_on_edge_cases(pattern, text):
    assert_same(pattern, text)
    for begin in range(min(len(text), 4) + 1):
        for end in {begin, min(len(text), begin + 1), min(len(text), begin + 2), len(text)}:
            assert_same(pattern, text, begin, end)


def test_gpt2_scan_splits_as_documented():
    # A few matches worked out by hand from the pattern (the comparisons
    # above only say the two paths agree).
    def pieces(text):
        return [text[b:e] for b, e in T.regex_matches(GPT2, text)]

    assert pieces("Hello world's 42 !!  x\n\n") == ["Hello", " world", "'s", " 42", " !!", " ", " x", "\n\n"]
    assert pieces("a\tb") == ["a", "b"]  # a lone tab before a non-space matches nothing
    assert pieces("x   ") == ["x", "   "]  # trailing whitespace: the whole run
    assert pieces("中文 é\u0301") == ["中文", " é", "\u0301"]  # a combining mark is "other"
