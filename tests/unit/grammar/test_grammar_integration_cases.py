"""llama.cpp's grammar integration cases (tests/fixtures/reference/grammars/grammar-integration-cases.json).

- Plain grammar cases: our recognizer accepts and rejects the same strings.
- Schema cases: OUR converter's grammar (not llama.cpp's) accepts and rejects the same strings.
- Token cases: strings stored as {"bytes": [...]} contain 0xFF + a 4-byte big-endian
  token id for a token-level terminal `<[id]>`; the text between markers is fed
  as one ordinary (non-special) token.
- Cases llama.cpp expects to fail to build are all left-recursive grammars, which
  muser accepts on purpose (Earley): those cases do not apply; instead we check
  that each parses and recognizes the language it describes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muser.grammar import Grammar

CASES_FILE = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "grammars" / "grammar-integration-cases.json"
CASES = json.loads(CASES_FILE.read_text(encoding="utf-8"))
PLAIN_TEXT_TOKEN = 1 << 30  # stands for "some ordinary token" between markers


def _segments(data: list[int]):
    """Split marker-encoded bytes into ('token', id) and ('text', bytes) pieces."""
    out, text, i = [], bytearray(), 0
    while i < len(data):
        if data[i] == 0xFF:
            if text:
                out.append(("text", bytes(text)))
                text = bytearray()
            out.append(("token", int.from_bytes(bytes(data[i + 1 : i + 5]), "big")))
            i += 5
        else:
            text.append(data[i])
            i += 1
    if text:
        out.append(("text", bytes(text)))
    return out


def _matches(grammar: Grammar, sample) -> bool:
    if isinstance(sample, str):
        return grammar.matches(sample)
    terminals = grammar.flat.token_terminals

    def matcher(index: int, token_id: int) -> bool:
        term = terminals[index]
        return (token_id == term.token_id) != term.negated

    state = grammar.state()
    for kind, value in _segments(sample["bytes"]):
        ok = state.accept_token(value, b"", matcher) if kind == "token" else state.accept_token(PLAIN_TEXT_TOKEN, value, matcher)
        if not ok:
            return False
    return state.can_end()


def _case_id(case) -> str:
    return case["desc"].split(".")[0].split("\n")[0][:50]


RUNNABLE = [c for c in CASES if not c.get("build_fails")]
LEFT_RECURSIVE = [c for c in CASES if c.get("build_fails")]


def test_case_file_holds_all_51_cases():
    assert len(CASES) == 51
    assert len(LEFT_RECURSIVE) == 4
    assert sum("schema" in c for c in CASES) == 33


@pytest.mark.parametrize("case", RUNNABLE, ids=[_case_id(c) for c in RUNNABLE])
def test_integration_case_accepts_and_rejects_like_llama_cpp(case):
    grammar = Grammar.from_json_schema(case["schema"]) if "schema" in case else Grammar(case["grammar"])
    wrongly_rejected = [s for s in case["accept"] if not _matches(grammar, s)]
    wrongly_accepted = [s for s in case["reject"] if _matches(grammar, s)]
    assert wrongly_rejected == [] and wrongly_accepted == []


# llama.cpp refuses these because they are left-recursive; muser accepts left
# recursion, so the expectation "build fails" does not apply. Each grammar's
# language instead, with strings worked out by hand:
LEFT_RECURSIVE_LANGUAGES = [
    (["a", "aa", "aaaa"], ["", "b", "ab"]),  # root ::= "a" | root "a"
    (["a", "aaa"], ["", "b"]),  # asdf ::= "a" | asdf "a"
    (["a", "cb", "eb", "adb", "cbdb"], ["", "b", "ab", "cd"]),  # asdf ::= "a" | foo "b"; foo ::= "c" | asdf "d" | "e"
    (["a", "cb", "adb", "blahadb", "blahcbdb"], ["", "blah", "blahb", "adbd"]),  # foo ::= ... | empty asdf "d"
]


@pytest.mark.parametrize("case, language", list(zip(LEFT_RECURSIVE, LEFT_RECURSIVE_LANGUAGES)))
def test_left_recursive_case_llama_cpp_refuses_is_accepted_and_recognized(case, language):
    accepted, rejected = language
    grammar = Grammar(case["grammar"])
    assert [s for s in accepted if not grammar.matches(s)] == []
    assert [s for s in rejected if grammar.matches(s)] == []
