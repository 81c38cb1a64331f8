"""Items 3 and 7: grammars and JSON schemas have bounded expansion and nesting,
checked when the Grammar is built, and fail only with GrammarError."""

from __future__ import annotations

import time

import pytest

import muser
import muser.limits
from muser import Grammar, GrammarError


@pytest.mark.parametrize("gbnf", [
    'root ::= ("x"{0,2000}){0,2000}',
    'root ::= (("x"{0,200}){0,200}){0,200}',
    'root ::= a{0,2000}\na ::= "x"{0,2000}',
    'root ::= ("x"*){0,2000}',
    'root ::= ("x"+ " "?){0,20}',
    'root ::= ("y" | "x"{1,500}){0,500}',
])
def test_nested_repetition_beyond_the_expansion_limit_is_refused_at_construction(gbnf):
    started = time.perf_counter()
    with pytest.raises(GrammarError, match="MAX_REPETITION_EXPANSION"):
        Grammar(gbnf)
    assert time.perf_counter() - started < 5


def test_nested_repetition_through_a_schema_pattern_is_refused():
    schema = {"type": "string", "pattern": "^(x{0,2000}){0,2000}$"}
    with pytest.raises(GrammarError, match="MAX_REPETITION_EXPANSION"):
        Grammar.from_json_schema(schema)


@pytest.mark.parametrize("gbnf, text", [
    ('root ::= ("[" "x"{0,1000} "]"){0,1000}', "[xx][x][]"),
    ('root ::= ("," [0-9]{1,15}){0,1000}', ",12,3"),
    ('root ::= "x"{0,2000}', "x" * 100),
    ('root ::= ("ab"{0,20}){0,20}', "ab" * 3),
    ('root ::= ("x"*)*', "x" * 30),
    ('root ::= ("x"{0,2000})*', "x" * 30),
])
def test_delimited_or_single_repetitions_stay_allowed(gbnf, text):
    assert Grammar(gbnf).matches(text)


def test_realistic_schema_with_large_bounds_is_accepted():
    schema = {"type": "array", "maxItems": 1000,
              "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 1000},
                                                         "n": {"type": "integer"}}}}
    g = Grammar.from_json_schema(schema)
    assert g.matches('[{"name": "a", "n": 12}, {"name": "bc", "n": -3}]')


def test_the_expansion_limit_can_be_raised(monkeypatch):
    monkeypatch.setattr(muser.limits, "MAX_REPETITION_EXPANSION", 40_000)
    Grammar('root ::= ("x"{0,200}){0,200}')  # 40,000: allowed now


def test_an_ambiguous_grammar_under_the_static_limit_is_stopped_by_the_item_bound(monkeypatch):
    monkeypatch.setattr(muser.limits, "MAX_RECOGNIZER_ITEMS", 2_000)
    g = Grammar('root ::= ("x" "x"{0,90}){0,90}')  # one "x" delimits nothing here
    started = time.perf_counter()
    with pytest.raises(GrammarError, match="MAX_RECOGNIZER_ITEMS"):
        g.matches("x" * 100)
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize("depth", [1_000, 5_000])
def test_deep_parentheses_raise_grammar_error(depth):
    with pytest.raises(GrammarError, match="MAX_GRAMMAR_NESTING"):
        Grammar("root ::= " + "(" * depth + '"x"' + ")" * depth)


def test_long_postfix_chains_raise_grammar_error():
    with pytest.raises(GrammarError, match="MAX_GRAMMAR_NESTING"):
        Grammar('root ::= "x"' + "?" * 5_000)


def test_nesting_within_the_limit_parses():
    # Each level is a group with alternatives (two tree levels: the
    # alternation and its sequence).
    depth = muser.limits.MAX_GRAMMAR_NESTING // 2 - 2
    assert Grammar("root ::= " + '("y" | ' * depth + '"x"' + ")" * depth).matches("x")


def test_grammar_text_longer_than_the_limit_is_refused(monkeypatch):
    monkeypatch.setattr(muser.limits, "MAX_GRAMMAR_CHARS", 1000)
    with pytest.raises(GrammarError, match="MAX_GRAMMAR_CHARS"):
        Grammar('root ::= "' + "x" * 2000 + '"')


def test_non_string_grammar_text_is_a_type_error():
    with pytest.raises(TypeError):
        Grammar(b'root ::= "x"')


# ------------------------------------------------------------- JSON schemas (item 7)

@pytest.mark.parametrize("schema", [
    {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
    {"type": "string", "minLength": "3"},
    {"type": "string", "maxLength": -1},
    {"type": "string", "maxLength": 1.5},
    {"type": "array", "items": 5},
    {"type": "array", "minItems": None},
    {"type": "array", "prefixItems": {"type": "string"}},
    {"type": "object", "properties": []},
    {"type": "object", "required": "a"},
    {"type": "object", "additionalProperties": 3},
    {"type": "integer", "minimum": "0"},
    {"type": "integer", "minimum": float("nan")},
    {"type": "integer", "maximum": float("inf")},
    {"type": "integer", "minimum": 10**400},
    {"type": "number", "exclusiveMinimum": [1]},
    {"enum": 3},
    {"enum": []},
    {"anyOf": {}},
    {"anyOf": []},
    {"allOf": [3]},
    {"type": 7},
    {"type": ["string", 3]},
    {"type": "string", "pattern": 5},
    {"type": "string", "pattern": "(" * 2000},
    {"type": "string", "pattern": "[" },
    {"type": "string", "format": 1},
    {"$ref": 1},
    {"$ref": "#/$defs/%ZZ"},
    {"const": float("nan")},
    {"properties": {"a": True}, "required": [1]},
])
def test_malformed_or_cyclic_schemas_raise_grammar_error(schema):
    with pytest.raises(GrammarError):
        Grammar.from_json_schema(schema)


@pytest.mark.parametrize("schema", [
    {"$ref": "#"},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
    {"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}, "required": ["a"]},
])
def test_ref_cycles_through_rules_build_a_grammar_that_matches_nothing(schema):
    # A $ref cycle becomes a recursive rule (no unbounded recursion in the
    # converter); with no base case it matches no text.
    assert not Grammar.from_json_schema(schema).matches('{"a": 1}')




def test_deeply_nested_schema_raises_grammar_error():
    schema: dict = {"type": "string"}
    for _ in range(2_000):
        schema = {"type": "array", "items": schema}
    with pytest.raises(GrammarError, match="MAX_GRAMMAR_NESTING"):
        Grammar.from_json_schema(schema)


def test_deeply_nested_schema_text_raises_grammar_error():
    text = '{"type": "array", "items": ' * 5_000 + "{}" + "}" * 5_000
    with pytest.raises(GrammarError):
        Grammar.from_json_schema(text)


def test_schema_of_a_wrong_kind_is_a_type_error_or_grammar_error():
    for schema in (3, None, [1], 1.5):
        with pytest.raises((GrammarError, TypeError)):
            Grammar.from_json_schema(schema)


def test_schema_text_that_is_not_json_raises_grammar_error():
    with pytest.raises(GrammarError):
        Grammar.from_json_schema("{'type': 'string'")
