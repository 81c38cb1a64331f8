"""GBNF parsing: every reference grammar parses; bad grammars fail with line:column."""

from __future__ import annotations

from pathlib import Path

import pytest

import muser
from muser.grammar import Grammar
from muser.grammar.flat_rules import TOKEN, TokenTerminal
from muser.grammar.parser import REPETITION_LIMIT, parse_gbnf

GRAMMARS = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "grammars"
REFERENCE_GBNF = sorted(GRAMMARS.glob("*.gbnf"))


def test_reference_grammar_directory_is_present():
    assert len(REFERENCE_GBNF) == 8


@pytest.mark.parametrize("path", REFERENCE_GBNF, ids=lambda p: p.name)
def test_every_reference_grammar_parses_and_has_a_reachable_start(path):
    g = Grammar(path.read_text(encoding="utf-8"))
    assert g.flat.productions[0][0] == g.flat.start
    # the start state exists and can be advanced or ended: the grammar is not empty
    st = g.state()
    assert st.allowed_next_bytes().any() or st.can_end()


def test_grammar_error_is_exported_from_muser():
    assert muser.GrammarError is muser.errors.GrammarError
    assert muser.Grammar is Grammar


# (grammar text, message fragment, line, column)
ERRORS = [
    ('root ::= foo', "undefined rule 'foo'", 1, 10),
    ('expr ::= "a"', "no rule named 'root'", 1, 1),
    ('root ::= "abc', "unterminated string literal", 1, 10),
    ('root ::= "ab\ncd"', "unterminated string literal", 1, 10),
    ('root ::= "a\\qb"', "bad escape '\\q'", 1, 12),
    ('root ::= "\\x4"', "'\\x' needs 2 hex digits", 1, 11),
    ('root ::= "\\u12G4"', "'\\u' needs 4 hex digits", 1, 11),
    ('root ::= "\\U00110000"', "beyond U+10FFFF", 1, 11),
    ('root ::= []', "empty character class", 1, 10),
    ('root ::= [a-z', "unterminated character class", 1, 10),
    ('root ::= [z-a]', "character range is backwards", 1, 11),
    ('root ::= [^\\x00-\\U0010FFFF]', "negated character class matches nothing", 1, 10),
    ('root "a"', "expected '::='", 1, 6),
    ('root ::= ("a" "b"', "expected ')'", 1, 10),
    ('root ::= "a")', "unbalanced ')'", 1, 13),
    ('root ::= * "a"', "no preceding item to repeat", 1, 10),
    ('root ::= "a" | +', "no preceding item to repeat", 1, 16),
    ('root ::= "a"\nroot ::= "b"', "rule 'root' is defined twice", 2, 1),
    ('root ::= "a"{3,1}', "maximum 1 is below its minimum 3", 1, 13),
    (f'root ::= "a"{{{REPETITION_LIMIT + 1}}}', "above the limit", 1, 13),
    ('root ::= "a"{x}', "expected a count", 1, 14),
    ('root ::= "a"{2', "expected '}'", 1, 15),
    ('root ::= !"a"', "'!' must be followed by a token terminal", 1, 10),
    ('root ::= <[12', "expected ']>'", 1, 10),
    ('root ::= <abc', "unterminated token terminal", 1, 10),
    ('root ::= "a" @', "unexpected character '@'", 1, 14),
    ('root ::= a\na ::= "x" b "y"\n\n# comment\nb ::= c', "undefined rule 'c'", 5, 7),
    ('root ::= "x"\n  ::= "y"', "expected a rule name", 2, 3),
    ('root ::= "x" other ::= "y"', "each rule must start on its own line", 1, 20),
]


@pytest.mark.parametrize("text, fragment, line, column", ERRORS, ids=[e[1] for e in ERRORS])
def test_bad_grammar_raises_grammar_error_with_line_and_column(text, fragment, line, column):
    with pytest.raises(muser.GrammarError) as info:
        Grammar(text)
    err = info.value
    assert fragment in str(err)
    assert (err.line, err.column) == (line, column)
    assert str(err).startswith(f"line {line}, column {column}:")


def test_grammar_error_is_a_value_error_too():
    with pytest.raises(ValueError):
        Grammar("root ::= nowhere")


def test_non_string_grammar_text_is_a_type_error():
    with pytest.raises(TypeError):
        Grammar(b'root ::= "a"')  # type: ignore[arg-type]


def test_custom_root_name_is_used_and_required():
    g = Grammar('start ::= "go"\nroot ::= "no"', root="start")
    assert g.matches("go") and not g.matches("no")
    with pytest.raises(muser.GrammarError, match="no rule named 'begin'"):
        Grammar('start ::= "go"', root="begin")


def test_rules_span_lines_inside_parentheses_and_after_alternation_bars():
    text = """
root ::=
    ( "a"
      "b" ) |
    "c"
    # a comment between rules
other ::= "unused"   # trailing comment
"""
    g = Grammar(text)
    assert g.matches("ab") and g.matches("c")
    assert not g.matches("a") and not g.matches("abc")


def test_newline_ends_a_top_level_sequence():
    # "b" on the next line is not part of root's sequence: it is a syntax error
    with pytest.raises(muser.GrammarError) as info:
        Grammar('root ::= "a"\n  "b"')
    assert (info.value.line, info.value.column) == (2, 3)


def test_crlf_line_endings_are_accepted():
    g = Grammar('root ::= a\r\na ::= "x"\r\n')
    assert g.matches("x")


def test_token_terminals_parse_into_token_symbols():
    parsed = parse_gbnf('root ::= <[10]> !<[11]> <think> !<|end|>')
    g = Grammar('root ::= <[10]> !<[11]> <think> !<|end|>')
    assert len(parsed.rules) == 1
    kinds = [kind for kind, _ in g.flat.productions[1][1]]
    assert kinds == [TOKEN] * 4
    assert g.flat.token_terminals == (
        TokenTerminal(10, None, False),
        TokenTerminal(11, None, True),
        TokenTerminal(None, "<think>", False),
        TokenTerminal(None, "<|end|>", True),
    )


def test_identical_character_classes_share_one_terminal():
    g = Grammar('root ::= [a-c] [abc] "b" [b]')
    charsets = g.flat.charsets
    assert len(charsets) == 2  # [a-c] == [abc], "b" == [b]


def test_repetition_at_the_limit_parses():
    g = Grammar(f'root ::= "a"{{0,{REPETITION_LIMIT}}}')
    assert g.matches("a" * REPETITION_LIMIT)
    assert not g.matches("a" * (REPETITION_LIMIT + 1))
