"""JSON schema -> GBNF text.

The grammar is *sound*: every text it accepts is JSON that validates against the
schema (for the keywords listed below); it is not always *complete*: some valid
documents are left out to keep it simple and small. What it produces:

- Whitespace: after `{`, `[`, `:`, `,` and after each value inside a container
  the `space` rule allows nothing, one space, or one or two newlines followed by
  up to 20 spaces/tabs (bounded, so a model cannot loop on whitespace). No
  whitespace before or after the top-level value.
- Objects: properties in declaration order, required ones first; optional ones
  may be skipped. With `properties`, extra keys are allowed only when
  `additionalProperties` says so (absent counts as false, like llama.cpp);
  without `properties`, any keys. Extra keys cannot repeat a declared name and
  are written without escape sequences (so that check is exact).
- Arrays: `items`, `prefixItems` (or draft-4 list-form `items`), `minItems`,
  `maxItems` (counts above 2000 are capped, which stays sound).
- Strings: `minLength`/`maxLength` (in characters), `pattern` (regex subset, see
  json_regex.py; lengths are ignored alongside a pattern), `format` date,
  time, date-time, uuid. A `\\u` surrogate pair counts as one character;
  lone surrogates are never produced.
- Numbers: integer `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`
  exactly (open sides capped at 16 digits); for `number` with bounds, the
  integer part is bounded so that every allowed value is in range, and no
  exponent is used.
- `enum`/`const` of any JSON values, local `$ref` (`#`, `#/$defs/...`,
  `#/definitions/...`, any JSON pointer into the document, recursion allowed),
  `anyOf`/`oneOf` (as alternatives), `allOf` (merged, for object-like parts),
  `type` lists, `true`/`{}` = any JSON value.

Ignored (output may violate them): multipleOf, uniqueItems, contains,
minProperties/maxProperties, patternProperties, dependencies, if/then/else,
not, and formats other than the four above. oneOf is treated as anyOf.
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from typing import Any, overload

from muser import limits
from muser.errors import GrammarError
from muser.grammar.json_regex import gbnf_literal, pattern_to_gbnf
from muser.grammar.number_ranges import UNBOUNDED_MAGNITUDE, integer_range, nonnegative_range

REPEAT_LIMIT = 2000

# rule name -> (body, rules it needs)
_PRIMITIVES: dict[str, tuple[str, tuple[str, ...]]] = {
    "space": ('| " " | "\\n"{1,2} [ \\t]{0,20}', ()),
    # one character: plain, a simple escape, a \u escape outside the surrogates, or a
    # surrogate pair as one unit (so lengths count characters; lone surrogates never appear)
    "char": (
        '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}'
        ' | [dD] [89abAB] [0-9a-fA-F]{2} "\\\\u" [dD] [c-fC-F] [0-9a-fA-F]{2}))',
        (),
    ),
    "key-char": ('[^"\\\\\\x7F\\x00-\\x1F]', ()),
    "string": ('"\\"" char* "\\""', ("char",)),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", ()),
    "integer": ('"-"? integral-part', ("integral-part",)),
    "number": (
        '"-"? integral-part ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?',
        ("integral-part",),
    ),
    "boolean": ('"true" | "false"', ()),
    "null": ('"null"', ()),
    "value": ("object | array | string | number | boolean | null", ("object", "array", "string", "number", "boolean", "null")),
    "object": (
        '"{" space (string space ":" space value space ("," space string space ":" space value space)*)? "}"',
        ("space", "string", "value"),
    ),
    "array": ('"[" space (value space ("," space value space)*)? "]"', ("space", "value")),
    "date": (
        '([1-9] [0-9]{3} | "0" ([1-9] [0-9]{2} | "0" ([1-9] [0-9] | "0" [1-9]))) "-" ('
        '("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | '
        '("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | '
        '"02-" ("0" [1-9] | "1" [0-9] | "2" [0-8]))',
        (),
    ),
    "time": (
        '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? '
        '("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])',
        (),
    ),
    "date-time": ('date "T" time', ("date", "time")),
    "uuid": (
        '[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}',
        (),
    ),
}
_FORMATS = ("date", "time", "date-time", "uuid")

_OBJECT_KEYS = ("properties", "additionalProperties", "required")
_ARRAY_KEYS = ("items", "prefixItems", "minItems", "maxItems")
_STRING_KEYS = ("minLength", "maxLength", "pattern", "format")
_NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_ANNOTATIONS = ("title", "description", "$schema", "$id", "$comment", "examples", "default", "$defs", "definitions")


def _rule_name(hint: str) -> str:
    name = re.sub(r"[^A-Za-z0-9-]+", "-", hint).strip("-")
    return name or "rule"


class _Converter:
    def __init__(self, document: Any):
        self.document = document
        self.rules: dict[str, str] = {"root": ""}
        self.ref_names: dict[str, str] = {}
        # Subschemas being visited: bounded, since visiting recurses (and an
        # allOf whose parts $ref back to it would otherwise recurse forever).
        self.depth = 0

    # ------------------------------------------------------------ rules

    def primitive(self, name: str) -> str:
        if name not in self.rules:
            body, deps = _PRIMITIVES[name]
            self.rules[name] = body
            for dep in deps:
                self.primitive(dep)
        return name

    def define(self, hint: str, body: str) -> str:
        base = _rule_name(hint)
        name = base
        k = 1
        while name in self.rules or name in _PRIMITIVES:
            if self.rules.get(name) == body:
                return name
            k += 1
            name = f"{base}-{k}"
        self.rules[name] = body
        return name

    def reserve(self, hint: str) -> str:
        """A fresh rule name whose body is filled in later (for recursive $refs)."""
        base = _rule_name(hint)
        name = base
        k = 1
        while name in self.rules or name in _PRIMITIVES:
            k += 1
            name = f"{base}-{k}"
        self.rules[name] = ""
        return name

    # ------------------------------------------------------------ schemas

    def visit(self, schema: Any, hint: str) -> str:
        """A GBNF expression for the JSON text of values valid under `schema`."""
        if self.depth >= limits.MAX_GRAMMAR_NESTING:
            raise GrammarError(
                f"schema at '{hint}' is nested deeper than muser.limits.MAX_GRAMMAR_NESTING = "
                f"{limits.MAX_GRAMMAR_NESTING} (or an allOf refers back to itself)"
            )
        self.depth += 1
        try:
            return self._visit(schema, hint)
        finally:
            self.depth -= 1

    def _visit(self, schema: Any, hint: str) -> str:
        if schema is True:
            return self.primitive("value")
        if schema is False:
            raise GrammarError(f"schema at '{hint}' is false: no value is valid")
        if not isinstance(schema, dict):
            raise GrammarError(f"schema at '{hint}' must be an object or a boolean, got {type(schema).__name__}")
        _check_keywords(schema, hint)
        if "$ref" in schema:
            rest = {k: v for k, v in schema.items() if k != "$ref" and k not in _ANNOTATIONS}
            if rest:
                return self.visit({"allOf": [{"$ref": schema["$ref"]}, rest]}, hint)
            return self.visit_ref(schema["$ref"])
        if "allOf" in schema:
            if not isinstance(schema["allOf"], list) or not schema["allOf"]:
                raise GrammarError(f"'allOf' at '{hint}' must be a non-empty list")
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for index, part in enumerate(schema["allOf"]):
                part = self.resolve(part)
                if isinstance(part, dict):
                    _check_keywords(part, f"{hint}-allOf-{index}")
                merged = _merge(merged, part)
            return self.visit(merged, hint)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                rest = {k: v for k, v in schema.items() if k != key and k not in _ANNOTATIONS}
                options = schema[key]
                if not isinstance(options, list) or not options:
                    raise GrammarError(f"'{key}' at '{hint}' must be a non-empty list")
                alts = []
                for i, option in enumerate(options):
                    if rest:
                        option = self.resolve(option)
                        if isinstance(option, dict):
                            _check_keywords(option, f"{hint}-{i}")
                    branch = _merge(rest, option) if rest else option
                    alts.append(self.visit(branch, f"{hint}-{i}"))
                return self.define(hint, " | ".join(alts))
        if "const" in schema:
            return self.const(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise GrammarError(f"'enum' at '{hint}' must be a non-empty list")
            return self.define(hint, " | ".join(self.const(v) for v in values))
        types = schema.get("type")
        if isinstance(types, list):
            if not types:
                raise GrammarError(f"'type' at '{hint}' is an empty list")
            alts = [self.visit({**schema, "type": t}, f"{hint}-{t}") for t in types]
            return self.define(hint, " | ".join(alts))
        if types is None:
            types = _infer_type(schema)
        if types == "object":
            return self.visit_object(schema, hint)
        if types == "array":
            return self.visit_array(schema, hint)
        if types == "string":
            return self.visit_string(schema, hint)
        if types == "integer":
            return self.visit_integer(schema, hint)
        if types == "number":
            return self.visit_number(schema, hint)
        if types == "boolean":
            return self.primitive("boolean")
        if types == "null":
            return self.primitive("null")
        if types == "any":
            return self.primitive("value")
        raise GrammarError(f"unknown type {types!r} at '{hint}'")

    def resolve(self, schema: Any) -> Any:
        """Follow `$ref`s at the top of `schema` (not inside it)."""
        seen = set()
        while isinstance(schema, dict) and "$ref" in schema and len(schema) == 1:
            ref = schema["$ref"]
            if not isinstance(ref, str):
                raise GrammarError(f"$ref must be a string, got {type(ref).__name__}")
            if ref in seen:
                raise GrammarError(f"$ref cycle through {ref!r}")
            seen.add(ref)
            schema = self.lookup(ref)
        return schema

    def lookup(self, ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise GrammarError(f"only local $ref ('#...') is supported, got {ref!r}")
        node = self.document
        pointer = ref[1:]
        if pointer and not pointer.startswith("/"):
            raise GrammarError(f"unsupported $ref {ref!r} (expected a JSON pointer like '#/$defs/name')")
        for raw in pointer.split("/")[1:] if pointer else []:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise GrammarError(f"$ref {ref!r} does not point into the schema")
        return node

    def visit_ref(self, ref: str) -> str:
        if not isinstance(ref, str):
            raise GrammarError(f"$ref must be a string, got {type(ref).__name__}")
        name = self.ref_names.get(ref)
        if name is not None:
            return name
        target = self.lookup(ref)
        hint = ref.rsplit("/", 1)[-1] if "/" in ref else "schema"
        name = self.reserve(f"ref-{hint}")
        self.ref_names[ref] = name
        self.rules[name] = self.visit(target, name + "-body")
        return name

    # ------------------------------------------------------------ values

    def const(self, value: Any) -> str:
        if value is None or isinstance(value, bool) or isinstance(value, (int, float, str)):
            if isinstance(value, float) and not math.isfinite(value):
                raise GrammarError(f"constant {value!r} has no JSON form")
            return gbnf_literal(json.dumps(value, ensure_ascii=False))
        space = self.primitive("space")
        if isinstance(value, list):
            if not value:
                return f'"[" {space} "]"'
            items = f' "," {space} '.join(f"{self.const(v)} {space}" for v in value)
            return f'("[" {space} {items} "]")'
        if isinstance(value, dict):
            if not value:
                return f'"{{" {space} "}}"'
            members = f' "," {space} '.join(
                f'{gbnf_literal(json.dumps(str(k), ensure_ascii=False))} {space} ":" {space} {self.const(v)} {space}'
                for k, v in value.items()
            )
            return f'("{{" {space} {members} "}}")'
        raise GrammarError(f"constant {value!r} is not a JSON value")

    def visit_object(self, schema: dict[str, Any], hint: str) -> str:
        properties = schema.get("properties", {})
        if not isinstance(properties, dict):
            raise GrammarError(f"'properties' at '{hint}' must be an object")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
            raise GrammarError(f"'required' at '{hint}' must be a list of strings")
        additional = schema.get("additionalProperties", None if properties or required else True)
        if not properties and not required and additional in (True, {}):
            return self.primitive("object")
        space = self.primitive("space")
        names = list(properties)
        for name in required:
            if name not in properties:
                names.append(name)
        required_set = set(required)
        ordered = [n for n in names if n in required_set] + [n for n in names if n not in required_set]
        slots = []
        for name in ordered:
            value = self.visit(properties.get(name, True), f"{hint}-{name}")
            key = gbnf_literal(json.dumps(name, ensure_ascii=False))
            kv = self.define(f"{hint}-{name}-kv", f'{key} {space} ":" {space} {value} {space}')
            slots.append((kv, name in required_set))
        extra = None
        if additional not in (None, False):
            value = self.visit(additional, f"{hint}-additional")
            key = self.excluded_key(names, hint)
            extra = self.define(f"{hint}-additional-kv", f'{key} {space} ":" {space} {value} {space}')
        # after[i]: members from slot i on, something already written (leading commas);
        # first[i]: the same when nothing was written yet
        n = len(slots)
        after = [""] * (n + 1)
        first = [""] * (n + 1)
        after[n] = f'("," {space} {extra})*' if extra else ""
        first[n] = f'({extra} ("," {space} {extra})*)?' if extra else ""
        for i in range(n - 1, -1, -1):
            kv, is_required = slots[i]
            tail = after[i + 1]
            if is_required:
                if i:
                    after[i] = self.define(f"{hint}-after-{i}", f'"," {space} {kv} {tail}'.strip())
                first[i] = f"{kv} {tail}".strip()
            else:
                if i:
                    after[i] = self.define(f"{hint}-after-{i}", f'("," {space} {kv})? {tail}'.strip())
                first[i] = self.define(f"{hint}-first-{i}", f"{kv} {tail} | {first[i + 1] or chr(34) * 2}".strip())
        body = first[0]
        return self.define(hint, f'"{{" {space} {body} "}}"')

    def excluded_key(self, names: list[str], hint: str) -> str:
        """A JSON key (no escapes) that is none of `names`."""
        kc = self.primitive("key-char")
        if not names:
            return f'"\\"" {kc}* "\\""'
        trie: dict[str, Any] = {}
        for name in names:
            node = trie
            for ch in name:
                node = node.setdefault(ch, {})
            node[""] = {}  # end marker

        def build(node: dict[str, Any]) -> str:
            children = sorted(k for k in node if k)
            options = []
            if "" not in node:
                options.append('""')
            plain = _plain_key_chars_except(children)
            if plain:
                options.append(f"{plain} {kc}*")
            for ch in children:
                if ord(ch) < 0x20 or ch in '"\\' or ord(ch) == 0x7F:
                    continue  # a name no escape-free key can spell
                options.append(f"{gbnf_literal(ch)} {build(node[ch])}")
            return "(" + " | ".join(options) + ")"

        return self.define(f"{hint}-additional-key", f'"\\"" {build(trie)} "\\""')

    def visit_array(self, schema: dict[str, Any], hint: str) -> str:
        space = self.primitive("space")
        items = schema.get("items")
        prefix = schema.get("prefixItems")
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems", False)
        prefix = prefix or []
        lo = _count(schema, "minItems", hint, 0)
        hi = _count(schema, "maxItems", hint, None)
        k = len(prefix)
        if items is None:
            items = False if prefix and lo <= k else True
        parts = [self.visit(p, f"{hint}-{i}") for i, p in enumerate(prefix)]
        extra_lo = max(lo - k, 0)
        extra_hi = None if hi is None else hi - k
        if extra_hi is not None and extra_hi < 0:
            raise GrammarError(f"array at '{hint}' has {k} prefixItems but maxItems {hi}")
        if items is False:
            if extra_lo > 0:
                raise GrammarError(f"array at '{hint}' needs {lo} items but allows only {k}")
            extra_hi = 0
        if extra_hi is not None and extra_hi > REPEAT_LIMIT:
            extra_hi = REPEAT_LIMIT  # fewer items than allowed: still valid
        if extra_lo > REPEAT_LIMIT:
            raise GrammarError(f"minItems {lo} at '{hint}' is above the supported {REPEAT_LIMIT}")
        if extra_hi is not None and extra_hi < extra_lo:
            raise GrammarError(f"array at '{hint}' has minItems above maxItems")
        item = self.visit(items, f"{hint}-item") if extra_hi != 0 else ""
        elements = [f"{p} {space}" for p in parts]
        body = f' "," {space} '.join(elements)
        if extra_hi == 0:
            inner = body
        else:
            element = f"{item} {space}"
            if parts:
                inner = body + " " + _repeat(f'"," {space} {element}', extra_lo, extra_hi)
            elif extra_lo == 0:
                more = _repeat(f'"," {space} {element}', 0, None if extra_hi is None else extra_hi - 1)
                inner = f"({element} {more})?"
            else:
                more = _repeat(f'"," {space} {element}', extra_lo - 1, None if extra_hi is None else extra_hi - 1)
                inner = f"{element} {more}"
        return self.define(hint, f'"[" {space} {inner} "]"')

    def visit_string(self, schema: dict[str, Any], hint: str) -> str:
        fmt = schema.get("format")
        if fmt is not None and not isinstance(fmt, str):
            raise GrammarError(f"'format' at '{hint}' must be a string, got {type(fmt).__name__}")
        if "pattern" in schema:
            pattern = schema["pattern"]
            if not isinstance(pattern, str):
                raise GrammarError(f"'pattern' at '{hint}' must be a string")
            body = pattern_to_gbnf(pattern, self.primitive("char"))
            return self.define(hint, f'"\\"" ({body}) "\\""')
        if fmt in _FORMATS:
            return self.define(f"{fmt}-string", f'"\\"" {self.primitive(fmt)} "\\""')
        lo = _count(schema, "minLength", hint, 0)
        hi = _count(schema, "maxLength", hint, None)
        if lo == 0 and hi is None:
            return self.primitive("string")
        if hi is not None and hi > REPEAT_LIMIT:
            hi = REPEAT_LIMIT
        if lo > REPEAT_LIMIT:
            raise GrammarError(f"minLength {lo} at '{hint}' is above the supported {REPEAT_LIMIT}")
        if hi is not None and hi < lo:
            raise GrammarError(f"string at '{hint}' has minLength above maxLength")
        char = self.primitive("char")
        return self.define(hint, f'"\\"" {_repeat(char, lo, hi)} "\\""')

    def visit_integer(self, schema: dict[str, Any], hint: str) -> str:
        lo, hi = _integer_bounds(schema, hint)
        if lo is None and hi is None:
            return self.primitive("integer")
        expr = integer_range(lo, hi)
        if expr is None:
            raise GrammarError(f"no integer satisfies the bounds at '{hint}'")
        return self.define(hint, expr)

    def visit_number(self, schema: dict[str, Any], hint: str) -> str:
        lo, hi = _integer_bounds(schema, hint)
        if lo is None and hi is None:
            return self.primitive("number")
        frac = '"." [0-9]{1,16}'
        options = []
        whole = integer_range(lo, hi)
        if whole is not None:
            options.append(whole)
        upper = _upper_bound(schema)
        lower = _lower_bound(schema)
        # "I.F" lies in [I, I+1): needs I >= lo (the smallest allowed integer) and I + 1 <= upper
        pos_lo = max(0, lo if lo is not None else 0)
        pos_hi = UNBOUNDED_MAGNITUDE if upper is None else min(math.floor(upper[0]) - 1, UNBOUNDED_MAGNITUDE)
        positive = nonnegative_range(pos_lo, pos_hi) if pos_lo <= pos_hi else None
        if positive is not None:
            options.append(f"{positive} {frac}")
        # "-I.F" lies in (-(I+1), -I]: needs -(I+1) >= lower and -I <= hi (the largest allowed integer)
        neg_lo = max(0, -hi) if hi is not None else 0
        neg_hi = UNBOUNDED_MAGNITUDE if lower is None else min(math.floor(-lower[0]) - 1, UNBOUNDED_MAGNITUDE)
        negative = nonnegative_range(neg_lo, neg_hi) if neg_lo <= neg_hi else None
        if negative is not None:
            options.append(f'"-" {negative} {frac}')
        # An exclusive integer bound B excludes the integer B itself but not
        # B + 0.5: with a fraction that is not all zeros, the integer part may be B.
        nonzero_frac = '"." [0-9]{0,15} [1-9]'
        if lower is not None and lower[1] and lower[0].denominator == 1 and lower[0] >= 0:
            edge = int(lower[0])
            if upper is None or edge + 1 <= upper[0]:
                options.append(f'"{edge}" {nonzero_frac}')
        if upper is not None and upper[1] and upper[0].denominator == 1 and upper[0] <= 0:
            edge = -int(upper[0])
            if lower is None or -(edge + 1) >= lower[0]:
                options.append(f'"-{edge}" {nonzero_frac}')
        if not options:
            raise GrammarError(f"no number satisfies the bounds at '{hint}'")
        return self.define(hint, " | ".join(options))


_SCHEMA_LIKE = (dict, bool)
_NUMBER = (int, float)

# The JSON type each keyword's value must have (checked before the keyword is
# used, so a malformed schema is a GrammarError in words, never a TypeError).
_KEYWORD_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "properties": ((dict,), "an object"),
    "required": ((list,), "a list of strings"),
    "additionalProperties": (_SCHEMA_LIKE, "a schema"),
    "items": ((dict, bool, list), "a schema or a list of schemas"),
    "prefixItems": ((list,), "a list of schemas"),
    "additionalItems": (_SCHEMA_LIKE, "a schema"),
    "pattern": ((str,), "a string"),
    "format": ((str,), "a string"),
    "enum": ((list,), "a non-empty list"),
    "anyOf": ((list,), "a non-empty list"),
    "oneOf": ((list,), "a non-empty list"),
    "allOf": ((list,), "a non-empty list"),
    "$ref": ((str,), "a string"),
    "$defs": ((dict,), "an object"),
    "definitions": ((dict,), "an object"),
    "minimum": (_NUMBER, "a number"),
    "maximum": (_NUMBER, "a number"),
    # (draft 4: a bool modifying minimum/maximum)
    "exclusiveMinimum": ((int, float, bool), "a number or a bool"),
    "exclusiveMaximum": ((int, float, bool), "a number or a bool"),
}
_COUNT_KEYWORDS = ("minItems", "maxItems", "minLength", "maxLength")


def _check_keywords(schema: dict[str, Any], hint: str) -> None:
    for key, (types, wanted) in _KEYWORD_TYPES.items():
        if key in schema:
            value = schema[key]
            if isinstance(value, bool) and bool not in types:
                ok = False
            else:
                ok = isinstance(value, types)
            if not ok:
                raise GrammarError(f"'{key}' at '{hint}' must be {wanted}, got {type(value).__name__}")
    for key in _COUNT_KEYWORDS:
        _count(schema, key, hint, None)
    if "required" in schema and not all(isinstance(name, str) for name in schema["required"]):
        raise GrammarError(f"'required' at '{hint}' must be a list of strings")
    type_value = schema.get("type")
    if type_value is not None and not isinstance(type_value, str) and not (
        isinstance(type_value, list) and all(isinstance(t, str) for t in type_value)
    ):
        raise GrammarError(f"'type' at '{hint}' must be a string or a list of strings, got {type_value!r}")


@overload
def _count(schema: dict[str, Any], key: str, hint: str, default: int) -> int: ...
@overload
def _count(schema: dict[str, Any], key: str, hint: str, default: None) -> int | None: ...


def _count(schema: dict[str, Any], key: str, hint: str, default: int | None) -> int | None:
    """A non-negative integer keyword (minItems, maxLength, ...); 3.0 counts as 3."""
    if key not in schema:
        return default
    value = schema[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GrammarError(f"'{key}' at '{hint}' must be a non-negative integer, got {value!r}")
    return value


def _repeat(expr: str, lo: int, hi: int | None) -> str:
    if hi is None:
        if lo == 0:
            return f"({expr})*"
        if lo == 1:
            return f"({expr})+"
        return f"({expr}){{{lo},}}"
    if hi == 0:
        return ""
    if lo == hi:
        return f"({expr}){{{lo}}}"
    if (lo, hi) == (0, 1):
        return f"({expr})?"
    return f"({expr}){{{lo},{hi}}}"


def _plain_key_chars_except(children: list[str]) -> str:
    excluded = "".join(
        f"\\x{ord(c):02X}" if ord(c) < 0x80 else c for c in children if c not in "\"\\" and ord(c) >= 0x20
    )
    return f'[^"\\\\\\x7F\\x00-\\x1F{excluded}]'


def _number_value(value: Any, key: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        raise GrammarError(f"'{key}' must be a finite number, got {value!r}")
    return Fraction(value)


def _lower_bound(schema: dict[str, Any]) -> tuple[Fraction, bool] | None:
    """(bound, exclusive) for the tightest lower bound, or None."""
    best: tuple[Fraction, bool] | None = None
    if "minimum" in schema:
        exclusive = schema.get("exclusiveMinimum") is True  # draft 4 boolean form
        best = (_number_value(schema["minimum"], "minimum"), exclusive)
    excl = schema.get("exclusiveMinimum")
    if excl is not None and not isinstance(excl, bool):
        candidate = (_number_value(excl, "exclusiveMinimum"), True)
        if best is None or candidate[0] >= best[0]:
            best = candidate
    return best


def _upper_bound(schema: dict[str, Any]) -> tuple[Fraction, bool] | None:
    best: tuple[Fraction, bool] | None = None
    if "maximum" in schema:
        exclusive = schema.get("exclusiveMaximum") is True
        best = (_number_value(schema["maximum"], "maximum"), exclusive)
    excl = schema.get("exclusiveMaximum")
    if excl is not None and not isinstance(excl, bool):
        candidate = (_number_value(excl, "exclusiveMaximum"), True)
        if best is None or candidate[0] <= best[0]:
            best = candidate
    return best


def _integer_bounds(schema: dict[str, Any], hint: str) -> tuple[int | None, int | None]:
    """The smallest and largest integers the numeric bounds allow (None = open)."""
    lower = _lower_bound(schema)
    upper = _upper_bound(schema)
    lo = hi = None
    if lower is not None:
        value, exclusive = lower
        lo = math.floor(value) + 1 if exclusive else math.ceil(value)
    if upper is not None:
        value, exclusive = upper
        hi = math.ceil(value) - 1 if exclusive else math.floor(value)
    return lo, hi


def _infer_type(schema: dict[str, Any]) -> str:
    if any(k in schema for k in _OBJECT_KEYS):
        return "object"
    if any(k in schema for k in _ARRAY_KEYS):
        return "array"
    if any(k in schema for k in _STRING_KEYS):
        return "string"
    if any(k in schema for k in _NUMBER_KEYS):
        return "number"
    return "any"


def _merge(a: Any, b: Any) -> dict[str, Any]:
    """The schema of values valid under both `a` and `b` (simple cases: object-like parts)."""
    # False first: merging a false part into {} must not hand `false` on as
    # the merged schema (the next part would then be merged into a bool).
    if a is False or b is False:
        raise GrammarError("allOf contains false: no value is valid")
    if a is True or a == {}:
        return dict(b) if isinstance(b, dict) else b
    if b is True or b == {}:
        return dict(a) if isinstance(a, dict) else a
    if not isinstance(a, dict) or not isinstance(b, dict):
        raise GrammarError("allOf parts must be schemas (objects or booleans)")
    out = dict(a)
    for key, value in b.items():
        if key not in out:
            out[key] = value
        elif key == "properties":
            props = dict(out[key])
            for name, sub in value.items():
                props[name] = {"allOf": [props[name], sub]} if name in props else sub
            out[key] = props
        elif key == "required":
            out[key] = list(dict.fromkeys(list(out[key]) + list(value)))
        elif key in ("minimum", "exclusiveMinimum", "minLength", "minItems"):
            out[key] = max(out[key], value)
        elif key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems"):
            out[key] = min(out[key], value)
        elif key == "type":
            left = out[key] if isinstance(out[key], list) else [out[key]]
            right = value if isinstance(value, list) else [value]
            both = [t for t in left if t in right or (t == "integer" and "number" in right)]
            both += [t for t in right if t == "integer" and "number" in left and t not in both]
            if not both:
                raise GrammarError(f"allOf parts have disjoint types {left} and {right}")
            out[key] = both if len(both) > 1 else both[0]
        elif key == "additionalProperties":
            if out[key] is False or value is False:
                out[key] = False
            else:
                out[key] = _merge(out[key], value)
        elif out[key] != value:
            raise GrammarError(f"allOf parts disagree on '{key}': {out[key]!r} vs {value!r}")
    return out


def json_schema_to_gbnf(schema: Any) -> str:
    """GBNF text (root rule `root`) for JSON values valid under `schema`.

    Raises GrammarError for schemas it cannot express (see the module docstring).
    """
    conv = _Converter(schema)
    conv.rules["root"] = conv.visit(schema, "root-value")
    return "".join(f"{name} ::= {body}\n" for name, body in conv.rules.items())
