"""Inputs that once broke a contract, in the fuzz harness's case format.

The first ones come from the hostile-input campaign behind issue 17; the
harness saves every new failing input as a JSON file in ``regressions/``.
``test_fuzz.py`` replays both through the same oracles as the fuzzer.
"""

from __future__ import annotations

CASES: list[tuple[str, dict]] = [
    # Item 1: quadratic tokenization of repeated words (BPE and SentencePiece).
    ("tokenizer", {"text": "7" * 200_000, "vocabulary": "gpt2"}),
    ("tokenizer", {"text": "a " * 80_000, "vocabulary": "spm"}),
    ("tokenizer", {"text": " " * 200_000, "vocabulary": "spm"}),
    # A lone surrogate escaped as UnicodeEncodeError.
    ("tokenizer", {"text": "a\udc80b", "vocabulary": "gpt2"}),
    # Item 3: nested bounded repetition (56 s and 2.4 GB for 100 characters).
    ("gbnf", {"source": 'root ::= ("x"{0,2000}){0,2000}', "text": "x" * 100}),
    ("gbnf", {"source": 'root ::= (("x"{0,2000}){0,2000}){0,2000}', "text": "x" * 10}),
    ("gbnf", {"source": 'root ::= ("x"*){0,2000}', "text": "x" * 100}),
    # Item 7: 1,000 nested parentheses raised RecursionError.
    ("gbnf", {"source": "root ::= " + "(" * 1000 + '"x"' + ")" * 1000, "text": "x"}),
    ("gbnf", {"source": 'root ::= "x"' + "?" * 3000, "text": "x"}),
    # Item 3 through a schema pattern.
    ("schema", {"schema": {"type": "string", "pattern": "^(x{0,2000}){0,2000}$"}, "value": "xx"}),
    # Item 7: $ref cycles and malformed keyword values.
    ("schema", {"schema": {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}, "value": 1}),
    ("schema", {"schema": {"$ref": "#"}, "value": 1}),
    ("schema", {"schema": {"type": "array", "minItems": None}, "value": []}),
    ("schema", {"schema": {"type": "string", "minLength": "3"}, "value": "abc"}),
    ("schema", {"schema": {"type": "string", "pattern": "(" * 2000}, "value": "x"}),
    ("schema", {"schema": {"type": "string", "format": 1}, "value": "x"}),
    ("schema", {"schema": {"required": [1], "properties": {"a": True}}, "value": {}}),
    # Found by the fuzz harness (TypeError before the keyword table).
    ("schema", {"schema": {"allOf": None}, "value": None}),
    ("schema", {"schema": {"$ref": [], "properties": True, "type": "#"}, "value": {}}),
    ("schema", {"schema": {"prefixItems": 1}, "value": None}),
    ("schema", {"schema": {"type": {}, "$ref": "#", "properties": None}, "value": None}),
    ("schema", {"schema": {"type": {}, "properties": {}, "$ref": "#", "required": None}, "value": None}),
]
