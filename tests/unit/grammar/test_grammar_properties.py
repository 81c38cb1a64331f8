"""Property tests (hypothesis).

Invariants, in words:
- every sentence produced by randomly deriving a grammar is accepted by the recognizer;
- for grammars that are regular, the recognizer agrees with Python's `re` on any string;
- anything the JSON grammar accepts is JSON (json.loads), and json.dumps output is accepted;
- anything a schema's grammar accepts validates against the schema (jsonschema);
- text generated token by token under a GrammarConstraint is accepted by the recognizer,
  and, for schemas, validates once the constraint lets it end.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import jsonschema
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammar_test_vocab import synthetic_vocab
from grammar_walk import random_sentence
from muser.grammar import Grammar, GrammarConstraint

GRAMMARS = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "grammars"
SETTINGS = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])


def validate(instance, schema) -> None:
    cls = jsonschema.validators.validator_for(schema)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(instance)


# ------------------------------------------------------------------ generated sentences

WALKED = {p.stem: Grammar(p.read_text(encoding="utf-8")) for p in sorted(GRAMMARS.glob("*.gbnf"))}
WALKED["ambiguous"] = Grammar('root ::= e\ne ::= e "+" e | e "*" e | "(" e ")" | [0-9]')
WALKED["right recursive"] = Grammar('root ::= "[" list "]"\nlist ::= item "," list | item\nitem ::= [a-z]{1,3} | "[" list "]"')
WALKED["counted"] = Grammar('root ::= ("0x" [A-F0-9]{2} " "?){3,5} [^\\n]{0,4}')


@SETTINGS
@given(name=st.sampled_from(sorted(WALKED)), seed=st.integers(0, 2**32 - 1))
def test_randomly_derived_sentences_are_accepted(name, seed):
    grammar = WALKED[name]
    text = random_sentence(grammar.flat, random.Random(seed))
    assert grammar.matches(text), (name, text)


# ------------------------------------------------------------------ agreement with re

REGULAR = [
    ('root ::= "a" [bc]* "d"?', r"a[bc]*d?"),
    ('root ::= ("ab" | "c"){1,3} "x"*', r"(?:ab|c){1,3}x*"),
    ('root ::= [^b]+ "b" .', r"[^b]+b.", ),
    ('root ::= x{2} | "c"\nx ::= "a" | "b"', r"(?:a|b){2}|c"),
    ('root ::= ([a-c] " "?){,4}', r"(?:[a-c] ?){0,4}"),
]
ALPHABET = "abcdx \n"


@SETTINGS
@given(case=st.sampled_from(REGULAR), text=st.text(alphabet=ALPHABET, max_size=10))
def test_regular_grammars_agree_with_python_re_on_any_string(case, text):
    gbnf, pattern = case
    assert Grammar(gbnf).matches(text) == bool(re.fullmatch(pattern, text, re.DOTALL)), (gbnf, text)


@SETTINGS
@given(case=st.sampled_from(REGULAR), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_mutated_sentences_are_rejected_exactly_when_re_rejects_them(case, seed, data):
    gbnf, pattern = case
    grammar = Grammar(gbnf)
    text = random_sentence(grammar.flat, random.Random(seed))
    pos = data.draw(st.integers(0, len(text)))
    op = data.draw(st.sampled_from(["insert", "delete", "replace"]))
    ch = data.draw(st.sampled_from(ALPHABET))
    if op == "insert":
        mutated = text[:pos] + ch + text[pos:]
    elif op == "delete":
        mutated = text[:pos] + text[pos + 1 :]
    else:
        mutated = text[:pos] + ch + text[pos + 1 :]
    assert grammar.matches(mutated) == bool(re.fullmatch(pattern, mutated, re.DOTALL))


# ------------------------------------------------------------------ JSON

JSON_ANY = Grammar.json(any_value=True)
# The JSON grammar deliberately leaves out a raw DEL (U+007F) in strings (as
# llama.cpp does: \u007f still works) and numbers beyond 16 digits, so the
# values generated here avoid those.
# No lone surrogates: json.dumps(ensure_ascii=False) passes them through, and
# a text holding one is not Unicode (matches() is False for it).
json_text = st.text(alphabet=st.characters(exclude_characters="\x7f", exclude_categories=("Cs",)), max_size=8)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**15), 10**15)
    | st.floats(-1e6, 1e6, allow_nan=False).map(lambda x: round(x, 6))
    | json_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_text, inner, max_size=4),
    max_leaves=12,
)


@SETTINGS
@given(value=json_values, indent=st.sampled_from([None, 2]), ascii_only=st.booleans())
def test_json_dumps_output_is_accepted_by_the_json_grammar(value, indent, ascii_only):
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    assert JSON_ANY.matches(text), text


@SETTINGS
@given(value=json_values, data=st.data())
def test_whatever_the_json_grammar_accepts_parses_as_json(value, data):
    text = json.dumps(value)
    pos = data.draw(st.integers(0, len(text)))
    ch = data.draw(st.sampled_from(list('{}[],:"\\ 0-.eE1tnfu\n')))
    mutated = text[:pos] + ch + text[pos + data.draw(st.integers(0, 1)) :]
    if JSON_ANY.matches(mutated):
        json.loads(mutated)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_random_json_grammar_sentences_parse(seed):
    text = random_sentence(JSON_ANY.flat, random.Random(seed))
    json.loads(text)


# ------------------------------------------------------------------ JSON schemas

leaf_schemas = st.one_of(
    st.just({"type": "string"}),
    st.builds(lambda lo, extra: {"type": "string", "minLength": lo, "maxLength": lo + extra},
              st.integers(0, 3), st.integers(0, 3)),
    st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
              st.integers(-1000, 1000), st.integers(0, 5000)),
    st.builds(lambda lo, span, excl: {"type": "number", ("exclusiveMinimum" if excl else "minimum"): lo,
                                      "maximum": lo + span},
              st.integers(-50, 50), st.integers(1, 100), st.booleans()),
    st.just({"type": "number", "exclusiveMaximum": 0}),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.lists(st.one_of(st.text(max_size=4), st.integers(-5, 5), st.none()), min_size=1, max_size=4,
             unique_by=lambda v: json.dumps(v)).map(lambda vs: {"enum": vs}),
    st.sampled_from([{"type": "string", "format": f} for f in ("date", "time", "date-time", "uuid")]),
    st.sampled_from([{"type": "string", "pattern": p} for p in ("^[a-z]{1,4}$", "^\\d+-\\w?$", "ab|cd", '^"\\\\x$')]),
)


def _object(props, required_mask, additional):
    names = [f"p{i}" for i in range(len(props))]
    schema = {"type": "object", "properties": dict(zip(names, props)),
              "required": [n for n, keep in zip(names, required_mask) if keep]}
    if additional is not None:
        schema["additionalProperties"] = additional
    return schema


schemas = st.recursive(
    leaf_schemas,
    lambda inner: st.one_of(
        st.builds(_object, st.lists(inner, max_size=3), st.lists(st.booleans(), min_size=3, max_size=3),
                  st.sampled_from([None, False, True, {"type": "integer"}])),
        st.builds(lambda item, lo, extra: {"type": "array", "items": item, "minItems": lo, "maxItems": lo + extra},
                  inner, st.integers(0, 2), st.integers(0, 3)),
        st.lists(inner, min_size=1, max_size=3).map(lambda alts: {"anyOf": alts}),
    ),
    max_leaves=6,
)


@settings(deadline=None, max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, seeds=st.lists(st.integers(0, 2**32 - 1), min_size=3, max_size=3))
def test_sentences_of_a_schema_grammar_validate_against_the_schema(schema, seeds):
    grammar = Grammar.from_json_schema(schema)
    for seed in seeds:
        text = random_sentence(grammar.flat, random.Random(seed), max_depth=16)
        assert grammar.matches(text)
        validate(json.loads(text), schema)


# ------------------------------------------------------------------ token-level generation

VOCAB = synthetic_vocab(3000, seed=11)
EOG = len(VOCAB)
VOCAB_WITH_EOG = VOCAB + [b""]


def _generate(constraint: GrammarConstraint, rng: np.random.Generator, max_tokens: int) -> tuple[bytes, bool]:
    out = bytearray()
    for step in range(max_tokens):
        mask = constraint.mask()
        if mask[EOG] and (step > max_tokens // 2 or rng.random() < 0.3):
            constraint.accept(EOG)
            return bytes(out), True
        allowed = np.flatnonzero(mask)
        assert len(allowed), "the grammar left no token allowed"
        # sample first, check only that token, mask on rejection: the sampler protocol
        guess = int(rng.integers(0, len(VOCAB_WITH_EOG)))
        token = guess if constraint.check(guess) else int(rng.choice(allowed))
        constraint.accept(token)
        if token == EOG:
            return bytes(out), True
        out += VOCAB_WITH_EOG[token]
    return bytes(out), False


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["json", "arithmetic", "list", "english", "chess"]), seed=st.integers(0, 2**32 - 1))
def test_token_by_token_generation_is_accepted_by_the_recognizer(name, seed):
    grammar = Grammar.json(any_value=True) if name == "json" else WALKED[name]
    gc = GrammarConstraint(grammar, VOCAB_WITH_EOG, [EOG])
    text, ended = _generate(gc, np.random.default_rng(seed), max_tokens=40)
    st_ = grammar.state()
    assert st_.accept_bytes(text)  # every generated prefix stays inside the language
    if ended:
        assert grammar.matches(text)


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, seed=st.integers(0, 2**32 - 1))
def test_generation_under_a_schema_grammar_validates_when_it_ends(schema, seed):
    grammar = Grammar.from_json_schema(schema)
    gc = GrammarConstraint(grammar, VOCAB_WITH_EOG, [EOG])
    text, ended = _generate(gc, np.random.default_rng(seed), max_tokens=60)
    assert grammar.state().accept_bytes(text)
    if ended:
        validate(json.loads(text.decode("utf-8")), schema)


# ------------------------------------------------------------------ robustness

GBNF_PIECES = ['root ::= ', 'a ::= ', '"x"', '"', "[a-z]", "[^", "]", "(", ")", "|", "*", "+", "?", "{2,3}",
               "{", "}", "a", "root", " ", "\n", "# c\n", "\\x4", "\\u00e9", "\\", ".", "<[5]>", "!", "<t>", "::="]


@settings(deadline=None, max_examples=300)
@given(pieces=st.lists(st.sampled_from(GBNF_PIECES), max_size=14), text=st.text(max_size=6))
def test_any_grammar_text_parses_or_raises_grammar_error(pieces, text):
    from muser.errors import GrammarError

    source = "".join(pieces)
    try:
        grammar = Grammar(source)
    except GrammarError as err:
        assert err.line >= 1 and err.column >= 1
        return
    grammar.matches(text)  # and a grammar that parses can be run
