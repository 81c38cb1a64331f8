"""The language of each GBNF construct: tables of (grammar, accepted, rejected)."""

from __future__ import annotations

import pytest

from muser.grammar import Grammar

CASES = [
    # literals and escapes
    ("literal", 'root ::= "hello"', ["hello"], ["", "hell", "hello!", "Hello"]),
    ("empty literal", 'root ::= ""', [""], ["a"]),
    ("escapes", r'root ::= "\n\r\t\\\"\[\]"', ["\n\r\t\\\"[]"], ["\\n"]),
    ("hex escape", r'root ::= "\x41\x7e"', ["A~"], ["a~"]),
    ("u escape", r'root ::= "\u00e9\u65e5"', ["é日"], ["e日"]),
    ("U escape", r'root ::= "\U0001F600"', ["😀"], ["\U0001F601"]),
    ("raw unicode literal", 'root ::= "日本語"', ["日本語"], ["日本", "日本語語"]),
    # character classes
    ("class", "root ::= [abc]", ["a", "b", "c"], ["d", "", "ab"]),
    ("range", "root ::= [a-z0-9]", ["a", "m", "z", "0", "9"], ["A", "-", "é"]),
    ("negated class", "root ::= [^a-z]", ["A", "0", "é", "日", "\n"], ["a", "q", ""]),
    ("class with escapes", r'root ::= [\]\[\\-]', ["]", "[", "\\", "-"], ["a"]),
    ("dash at the ends is literal", "root ::= [-a] [a-]", ["-a", "a-", "aa", "--"], ["b-"]),
    ("class of hex escapes", r"root ::= [\x00-\x1F]", ["\x00", "\x1f"], [" "]),
    ("unicode range", "root ::= [ぁ-ゟ]+", ["ひらがな"], ["カタカナ", "abc"]),
    ("astral range", r"root ::= [\U0001F600-\U0001F64F]", ["😀", "🙏"], ["🚀", "a"]),
    # any character
    ("any", "root ::= .", ["a", "\n", "é", "日", "😀"], ["", "ab"]),
    ("any sandwich", 'root ::= . "x" .', ["axb", "日x😀"], ["xb", "ax"]),
    # sequences, alternation, grouping
    ("sequence", 'root ::= "a" "b" "c"', ["abc"], ["ab", "acb"]),
    ("alternation", 'root ::= "cat" | "dog" | "bird"', ["cat", "dog", "bird"], ["catdog", "cow"]),
    ("empty alternative", 'root ::= | "x"', ["", "x"], ["xx"]),
    ("group", 'root ::= ("a" | "b") "c"', ["ac", "bc"], ["c", "abc"]),
    ("nested groups", 'root ::= ("a" ("b" | "c") | "d")+', ["ab", "acd", "dddab"], ["a", "bd"]),
    # rule references
    ("rule refs", 'root ::= greeting " " name\ngreeting ::= "hi" | "hello"\nname ::= [A-Z] [a-z]*',
     ["hi Bob", "hello Al", "hi X"], ["hi bob", "hey Bob", "hi "]),
    # repetition operators
    ("star", 'root ::= "ab"*', ["", "ab", "ababab"], ["a", "aba"]),
    ("plus", 'root ::= [0-9]+', ["0", "42", "1234567890"], ["", "4a"]),
    ("optional", 'root ::= "-"? [0-9]', ["-1", "1"], ["--1", "-"]),
    ("exact count", 'root ::= [ab]{3}', ["aaa", "bab"], ["aa", "aaaa"]),
    ("at least", 'root ::= "x"{2,}', ["xx", "xxxxxxx"], ["", "x"]),
    ("between", 'root ::= "x"{1,3}', ["x", "xx", "xxx"], ["", "xxxx"]),
    ("up to", 'root ::= "x"{,2}', ["", "x", "xx"], ["xxx"]),
    ("zero count", 'root ::= "a" "x"{0} "b"', ["ab"], ["axb"]),
    ("zero to zero", 'root ::= "a" "x"{0,0}', ["a"], ["ax"]),
    ("repeat group", 'root ::= ("ab" | "c"){2,3}', ["abc", "cc", "ababab", "cabc"], ["ab", "abababc"]),
    ("repeat spaces in braces", 'root ::= "x"{ 1 , 2 }', ["x", "xx"], ["", "xxx"]),
    ("repeat after space", 'root ::= "x" *', ["", "xxx"], ["y"]),
    ("nested star", "root ::= ( [x]* )*", ["", "x", "xxx"], ["y"]),
    ("star of nullable group", 'root ::= ("a"?)* "b"', ["b", "ab", "aaab"], ["ba"]),
    # recursion
    ("left recursion", 'root ::= root "a" | "b"', ["b", "ba", "baaaa"], ["a", "ab"]),
    ("right recursion", 'root ::= "a" root | "b"', ["b", "ab", "aaaab"], ["a", "ba"]),
    ("indirect left recursion", 'root ::= a\na ::= b "x" | "y"\nb ::= a "z" | "w"',
     ["y", "wx", "yzx", "wxzx"], ["x", "yz", "wxz"]),
    ("nullable left recursion", 'root ::= e root "a" | "b"\ne ::= | "c"',
     ["b", "ba", "cba", "cbaa", "ccbaa"], ["", "a", "cb", "bc", "ccba"]),
    ("balanced parentheses", 'root ::= "(" root ")" root | ""', ["", "()", "(())()", "((()))"], ["(", "())", ")("]),
    ("ambiguous", 'root ::= x x\nx ::= "a" | "aa" | ""', ["", "a", "aa", "aaa", "aaaa"], ["aaaaa", "b"]),
    ("ambiguous expression",
     'root ::= e\ne ::= e "+" e | e "*" e | "(" e ")" | [0-9]',
     ["1", "1+2*3", "(1+2)*3", "((1))"], ["", "1+", "(1", "12", "1+*2"]),
    # comments and layout
    ("comments", 'root ::= "a" # the letter a\n# full line\n', ["a"], ["a #"]),
]


@pytest.mark.parametrize("name, text, accepted, rejected", CASES, ids=[c[0] for c in CASES])
def test_construct_accepts_and_rejects_exactly(name, text, accepted, rejected):
    g = Grammar(text)
    for s in accepted:
        assert g.matches(s), f"{name}: should accept {s!r}"
    for s in rejected:
        assert not g.matches(s), f"{name}: should reject {s!r}"


def test_matches_takes_bytes_too():
    g = Grammar('root ::= "é"')
    assert g.matches("é".encode("utf-8"))
    assert not g.matches(b"\xc3")  # a lone lead byte is an incomplete character
