"""JSON schema -> GBNF: accepted and rejected documents per keyword, and clear errors."""

from __future__ import annotations

import json

import jsonschema
import pytest

from muser.errors import GrammarError
from muser.grammar import Grammar
from muser.grammar.json_schema import json_schema_to_gbnf



def validate(instance, schema) -> None:
    """jsonschema validation with the format checker of the schema's own draft."""
    cls = jsonschema.validators.validator_for(schema)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(instance)


# (name, schema, accepted texts, rejected texts). Every accepted text must also be
# valid JSON that validates against the schema (checked below).
CASES = [
    ("any value", True, ['{"a": [1, "x", null]}', "3.5", '"s"', "[]", "false"], ["", "{", "nul"]),
    ("json object default", {"type": "object"}, ["{}", '{"a": {"b": [true]}}'], ["[]", '"x"', "{,}"]),
    ("null", {"type": "null"}, ["null"], ["None", "0"]),
    ("boolean", {"type": "boolean"}, ["true", "false"], ["True", "1"]),
    ("type list", {"type": ["integer", "string"]}, ["5", '"five"'], ["5.5", "null"]),
    ("integer", {"type": "integer"}, ["0", "-7", "1234567890123456"], ["1.0", "01", "+1", "12345678901234567"]),
    ("integer bounds", {"type": "integer", "minimum": -5, "maximum": 120},
     ["-5", "0", "99", "120"], ["-6", "121", "1000", "-0"]),
    ("integer exclusive bounds", {"type": "integer", "exclusiveMinimum": 1.5, "exclusiveMaximum": 4},
     ["2", "3"], ["1", "4"]),
    ("draft 4 boolean exclusive", {"$schema": "http://json-schema.org/draft-04/schema#",
                                   "type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 3},
     ["1", "3"], ["0", "4"]),
    ("number", {"type": "number"}, ["0", "-1.5", "2e10", "3.25E-2", "1234.5678"], ["1.", ".5", "--1", "1e"]),
    ("number bounds", {"type": "number", "minimum": 0.5, "maximum": 10},
     ["1", "9.75", "10", "5.0"], ["0.4", "-1", "11", "10.5", "1e3"]),
    ("number exclusive upper", {"type": "number", "exclusiveMaximum": 0},
     ["-1", "-0.5", "-12.25"], ["0", "0.5", "1", "-0.0"]),
    ("number exclusive lower", {"type": "number", "exclusiveMinimum": 0, "maximum": 2},
     ["0.5", "0.001", "1", "1.75", "2"], ["0", "0.0", "-0.5", "2.5"]),
    ("number exclusive lower not integer", {"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 3.5},
     ["1", "2.75"], ["0.5", "0", "3.5", "4"]),
    ("string", {"type": "string"}, ['""', '"a b"', '"\\"\\\\\\n\\u00e9"', '"日本 😀"'], ["a", '"\n"', '"\\x"', '"\\ud800"']),
    ("string lengths", {"type": "string", "minLength": 2, "maxLength": 3},
     ['"ab"', '"日本語"', '"\\n\\t"'], ['"a"', '"abcd"']),
    ("enum", {"enum": ["red", 42, None, [1, 2], {"k": "v"}]},
     ['"red"', "42", "null", "[1, 2]", "[1,2]", '{"k": "v"}'], ['"blue"', "420", "[2, 1]"]),
    ("const string with quotes", {"const": 'say "hi"\\'}, ['"say \\"hi\\"\\\\"'], ['"say hi"']),
    ("const non-ascii", {"const": "café"}, ['"café"'], ['"cafe"']),
    ("object properties", {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name"],
    }, ['{"name": "Bo"}', '{"name": "Bo", "age": 3}', '{ "name" : "Bo" ,\n  "age": 3 }'],
       ['{}', '{"age": 3}', '{"age": 3, "name": "Bo"}', '{"name": "Bo", "x": 1}', '{"name": 3}']),
    ("required first then declaration order", {
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
        "required": ["c"],
    }, ['{"c": 1}', '{"c": 1, "a": 2}', '{"c": 1, "a": 2, "b": 3}', '{"c": 1, "b": 3}'],
       ['{"a": 2, "c": 1}', '{"c": 1, "b": 3, "a": 2}']),
    ("required key without a property schema", {"required": ["id"]}, ['{"id": [1]}', '{"id": "x"}'], ["{}"]),
    ("additionalProperties schema", {
        "type": "object", "properties": {"id": {"type": "integer"}},
        "additionalProperties": {"type": "boolean"},
    }, ['{"id": 1}', '{"id": 1, "x": true}', '{"x": false, "yz": true}', '{"idx": true}'],
       ['{"id": true}', '{"x": 1}', '{"id": 1, "id": 2}']),
    ("object with only additionalProperties", {"type": "object", "additionalProperties": {"type": "integer"}},
     ["{}", '{"a": 1, "b": 2}'], ['{"a": "x"}']),
    ("additionalProperties false, no properties", {"type": "object", "additionalProperties": False},
     ["{}"], ['{"a": 1}']),
    ("array items and counts", {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
     ["[1]", "[1, 2, 3]", "[ 1 ,2 ]"], ["[]", "[1, 2, 3, 4]", '["1"]']),
    ("array exact count", {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 2},
     ["[true, false]"], ["[true]", "[true, true, true]"]),
    ("prefixItems then items", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                                "items": {"type": "boolean"}},
     ['["a", 1]', '["a", 1, true, false]'], ["[1]", '["a"]', '["a", 1, 2]']),
    ("tuple without extra items", {"type": "array", "prefixItems": [{"type": "null"}], "items": False},
     ["[null]"], ["[]", "[null, null]"]),
    ("items false", {"type": "array", "items": False}, ["[]"], ["[1]"]),
    ("nested array of objects", {
        "type": "array",
        "items": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
    }, ['[{"x": 1}, {"x": -2.5}]', "[]"], ['[{"y": 1}]', '[{"x": "1"}]']),
    ("anyOf", {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
     ["1", '"ab"'], ['"abc"', "1.5"]),
    ("oneOf with shared siblings", {"type": "object", "properties": {"k": {"type": "integer"}},
                                    "oneOf": [{"required": ["k"]}, {"properties": {"k": {"minimum": 5}}}]},
     ['{"k": 1}', "{}"], ['{"k": "x"}']),
    ("allOf merges objects", {"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"properties": {"b": {"type": "string"}}, "required": ["b"]},
    ]}, ['{"a": 1, "b": "x"}'], ['{"a": 1}', '{"b": "x"}', '{"b": "x", "a": 1}']),
    ("local $ref", {"$defs": {"pos": {"type": "integer", "minimum": 1}},
                    "type": "object", "properties": {"n": {"$ref": "#/$defs/pos"}}, "required": ["n"]},
     ['{"n": 3}'], ['{"n": 0}']),
    ("recursive $ref", {"$defs": {"tree": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}},
        "required": ["v"]}}, "$ref": "#/$defs/tree"},
     ['{"v": 1}', '{"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}'], ['{"v": 1, "kids": [{}]}']),
    ("ref to the root", {"type": "array", "items": {"$ref": "#"}, "maxItems": 2},
     ["[]", "[[], [[]]]"], ["[1]", "[[], [], []]"]),
    ("definitions (draft 7)", {"definitions": {"s": {"type": "string"}}, "$ref": "#/definitions/s"},
     ['"x"'], ["1"]),
    ("format date", {"type": "string", "format": "date"},
     ['"2024-02-28"', '"1999-12-31"', '"2023-04-30"'], ['"2023-02-30"', '"2023-04-31"', '"2023-13-01"', '"0000-01-01"']),
    ("format time", {"type": "string", "format": "time"},
     ['"18:25:43Z"', '"18:25:43.511+02:00"'], ['"24:00:00Z"', '"18:25"', '"18:60:00Z"']),
    ("format date-time", {"type": "string", "format": "date-time"},
     ['"2012-04-23T18:25:43.511Z"'], ['"2012-04-23 18:25:43Z"']),
    ("format uuid", {"type": "string", "format": "uuid"},
     ['"12345678-1234-5678-9abc-DEF012345678"'], ['"12345678-1234-5678-9abc-DEF01234567"']),
    ("anchored pattern", {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
     ['"AB-123"'], ['"AB-12"', '"ab-123"', '"xAB-123"']),
    ("unanchored pattern searches", {"type": "string", "pattern": "cat|dog"},
     ['"cat"', '"a dog!"', '"concatenate"'], ['"cow"', '""']),
    ("pattern with quote and backslash", {"type": "string", "pattern": '^a"\\\\b$'},
     ['"a\\"\\\\b"'], ['"a\\"b"']),
    ("pattern groups and classes", {"type": "string", "pattern": "^(?:[a-c]+|x{2,3})\\.(\\w)?$"},
     ['"abc."', '"xx.z"', '"xxx._"'], ['"x."', '"abcx."', '"ab.!!"']),
]


@pytest.mark.parametrize("name, schema, accepted, rejected", CASES, ids=[c[0] for c in CASES])
def test_schema_grammar_accepts_and_rejects(name, schema, accepted, rejected):
    g = Grammar.from_json_schema(schema)
    for text in accepted:
        assert g.matches(text), f"{name}: should accept {text!r}"
        # anything the grammar accepts is valid JSON for the schema
        validate(json.loads(text), schema)
    for text in rejected:
        assert not g.matches(text), f"{name}: should reject {text!r}"


def test_schema_may_be_given_as_json_text():
    assert Grammar.from_json_schema('{"type": "integer", "maximum": 3}').matches("3")
    with pytest.raises(GrammarError, match="not valid JSON"):
        Grammar.from_json_schema("{nope")


def test_grammar_json_is_an_object_unless_any_value_is_asked_for():
    assert Grammar.json().matches('{"a": 1}') and not Grammar.json().matches("[1]")
    assert Grammar.json(any_value=True).matches("[1]")


def test_converter_output_is_gbnf_text_with_a_root_rule():
    text = json_schema_to_gbnf({"type": "object", "properties": {"a": {"type": "string"}}})
    assert text.startswith("root ::= ")
    assert Grammar(text).matches('{"a": "x"}')


ERRORS = [
    ("false schema", False, "no value is valid"),
    ("remote ref", {"$ref": "https://example.com/s.json"}, "only local $ref"),
    ("dangling ref", {"$ref": "#/$defs/missing"}, "does not point into the schema"),
    ("unknown type", {"type": "decimal"}, "unknown type"),
    ("empty enum", {"enum": []}, "non-empty list"),
    ("disjoint allOf", {"allOf": [{"type": "string"}, {"type": "integer"}]}, "disjoint types"),
    ("impossible integer", {"type": "integer", "minimum": 5, "maximum": 4}, "no integer satisfies"),
    ("impossible number", {"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1}, "no number satisfies"),
    ("min over max items", {"type": "array", "minItems": 3, "maxItems": 1}, "minItems above maxItems"),
    ("min over max length", {"type": "string", "minLength": 3, "maxLength": 1}, "minLength above maxLength"),
    ("lookahead pattern", {"type": "string", "pattern": "^(?=a)a$"}, "not supported"),
    ("backreference pattern", {"type": "string", "pattern": "(a)\\1"}, "unsupported escape"),
    ("non-finite bound", {"type": "number", "maximum": float("inf")}, "finite number"),
    ("schema not an object", {"properties": {"a": 3}}, "must be an object or a boolean"),
]


@pytest.mark.parametrize("name, schema, fragment", ERRORS, ids=[e[0] for e in ERRORS])
def test_inexpressible_schema_raises_grammar_error(name, schema, fragment):
    with pytest.raises(GrammarError, match=fragment.replace("$", "\\$")):
        Grammar.from_json_schema(schema)
