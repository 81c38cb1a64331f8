"""Fuzz harness for the inputs a caller (or a model file) controls.

Targets, each with its oracle (what a case may do):

- ``gguf``: mutated tiny model files. Opening raises only ModelFormatError;
  a file that opens as an Engine can tokenize, generate and detokenize.
- ``tokenizer``: random Unicode, random bytes, pathological runs, on a BPE and
  a SentencePiece vocabulary. Ids are in range, decoding them works, time is
  linear in the length; only ValueError (lone surrogates) is allowed.
- ``gbnf``: grammar texts assembled from GBNF pieces, matched against random
  text. Only GrammarError.
- ``schema``: random JSON schemas (keywords with values of every JSON type,
  nested, with $refs). Only GrammarError; a built grammar can match.

Every case runs under a time cap (checked after it returns, plus a hard
wall-clock cap on the whole child process for a case that never returns) and
in a child process whose address space is capped (RLIMIT_AS), so a case that
needs unbounded memory fails with MemoryError instead of taking the machine.
Before each case the child writes the input to a file; when the child is
killed, the parent reports that input. Failing inputs are saved under
``tests/hostile/regressions/`` (commit them: ``test_fuzz.py`` replays every
file there, and ``regression_cases.py`` holds the campaign's originals).

CI runs every target briefly (``tests/hostile/test_fuzz.py``, about two minutes
in all). The longer run::

    python -m tests.hostile.fuzz_harness --seconds 600            # every target, 10 min each
    python -m tests.hostile.fuzz_harness --target schema --seconds 3600 --seed 7
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import hypothesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
REGRESSIONS = Path(__file__).resolve().parent / "regressions"
TARGETS = ("gguf", "tokenizer", "gbnf", "schema")
MEMORY_CAP_BYTES = 4 << 30
CASE_SECONDS = 5.0  # a case (after its input is built) may take this long
ROUND_EXAMPLES = 200


# ------------------------------------------------------------------ oracles

class CaseFailure(AssertionError):
    """A case broke its target's contract."""


def _timed(seconds: float, fn: Callable[[], Any], what: str) -> Any:
    started = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - started
    if elapsed > seconds:
        raise CaseFailure(f"{what} took {elapsed:.2f} s, above the cap of {seconds:.2f} s")
    return result


@dataclass
class Context:
    """What the oracles need, built once per process."""

    workdir: Path
    base_model: bytes
    engines: dict[str, Any]


_CONTEXT: Context | None = None


def context() -> Context:
    global _CONTEXT
    if _CONTEXT is None:
        import muser
        from tests.fixtures.tiny_models import write_tiny_model

        workdir = Path(tempfile.mkdtemp(prefix="muser-fuzz-"))
        gpt2 = write_tiny_model(workdir / "gpt2.gguf", "llama", tokenizer="gpt2")
        spm = write_tiny_model(workdir / "spm.gguf", "llama", tokenizer="llama")
        engines = {name: muser.Engine(path, backend="null", threads=1) for name, path in
                   (("gpt2", gpt2), ("spm", spm))}
        _CONTEXT = Context(workdir, gpt2.read_bytes(), engines)
    return _CONTEXT


def check_gguf(data: bytes) -> str:
    """Open mutated bytes as a GGUF and, if that works, as an engine that generates."""
    import muser
    from muser import _core

    ctx = context()
    path = ctx.workdir / "case.gguf"
    path.write_bytes(data)
    try:
        _timed(CASE_SECONDS, lambda: _core.GgufFile.open(str(path)), "GgufFile.open")
    except muser.ModelFormatError:
        return "refused by the reader"
    try:
        engine = _timed(CASE_SECONDS, lambda: muser.Engine(path, backend="null", threads=1), "Engine()")
    except muser.ModelFormatError:
        return "refused by the loader"
    config = engine.config  # a file that loads has a config ...
    assert isinstance(config, dict)
    ids = engine.tokenize("Hello world, 12 tokens!")  # ... tokenizes ...
    engine.detokenize(ids)
    pool = muser.SlotPool(engine, slots=1, max_context=min(64, int(config["context_length"])))
    if len(ids) + 1 < pool.max_context:  # ... and generates (any sampled id must detokenize)
        _timed(CASE_SECONDS, lambda: muser.generate(pool, ids or [0], max_tokens=4, temperature=1.0, seed=1),
               "generate")
    return "loaded and generated"


def check_tokenizer(text: str, vocabulary: str) -> str:
    engine = context().engines[vocabulary]
    cap = 1.0 + len(text) * 20e-6  # generous: prose runs at ~0.1 us per character
    try:
        ids = _timed(cap, lambda: engine.tokenize(text), f"tokenize({len(text)} chars)")
    except ValueError as exc:
        if "surrogate" not in str(exc):
            raise
        return "lone surrogate refused"
    n_vocab = engine.n_vocab
    if any(not 0 <= t < n_vocab for t in ids):
        raise CaseFailure("tokenize returned an id outside the vocabulary")
    _timed(cap, lambda: engine.detokenize(ids), "detokenize")
    return "tokenized"


def check_gbnf(source: str, text: str) -> str:
    from muser import Grammar, GrammarError

    try:
        grammar = _timed(CASE_SECONDS, lambda: Grammar(source), "Grammar()")
    except GrammarError:
        return "refused"
    try:
        _timed(CASE_SECONDS, lambda: grammar.matches(text), "matches")
    except GrammarError as exc:
        if "MAX_RECOGNIZER_ITEMS" not in str(exc):
            raise
        return "too ambiguous"
    return "matched"


def check_schema(schema: Any, value: Any) -> str:
    from muser import Grammar, GrammarError

    try:
        grammar = _timed(CASE_SECONDS, lambda: Grammar.from_json_schema(schema), "from_json_schema")
    except GrammarError:
        return "refused"
    try:
        _timed(CASE_SECONDS, lambda: grammar.matches(json.dumps(value)), "matches")
    except GrammarError as exc:
        if "MAX_RECOGNIZER_ITEMS" not in str(exc):
            raise
        return "too ambiguous"
    return "built"


def run_case(target: str, case: dict) -> str:
    """Run one recorded case (the form saved in regressions/) through its oracle."""
    if target == "gguf":
        return check_gguf(mutate(context().base_model, case["mutations"]))
    if target == "tokenizer":
        return check_tokenizer(case["text"], case["vocabulary"])
    if target == "gbnf":
        return check_gbnf(case["source"], case["text"])
    if target == "schema":
        return check_schema(case["schema"], case["value"])
    raise ValueError(f"unknown target {target!r}")


# ------------------------------------------------------------------ inputs

# Values that break size and offset fields.
INTERESTING_U64 = [0, 1, 2, 3, 31, 32, 33, 255, 4096, 2**20, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1,
                   2**63, 2**64 - 1]


def mutate(base: bytes, mutations: list) -> bytes:
    """Apply ("byte", pos, value) / ("u64", pos, value) / ("u32", pos, value) /
    ("truncate", pos) / ("insert", pos, hex) edits in order."""
    data = bytearray(base)
    for m in mutations:
        if not data:
            break
        kind, pos = m[0], m[1] % len(data)
        if kind == "byte":
            data[pos] = m[2]
        elif kind == "u32":
            data[pos:pos + 4] = struct.pack("<I", m[2] % 2**32)
        elif kind == "u64":
            data[pos:pos + 8] = struct.pack("<Q", m[2] % 2**64)
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = bytes.fromhex(m[2])
    return bytes(data)


def _header_positions() -> st.SearchStrategy[int]:
    # Most of a model file is tensor data nobody validates byte by byte;
    # mutations go where the structure is (the first ~40 kB: header, keys,
    # tensor infos) and occasionally anywhere.
    return st.one_of(st.integers(0, 40_000), st.integers(0, 2**31))


mutation = st.one_of(
    st.tuples(st.just("byte"), _header_positions(), st.integers(0, 255)),
    st.tuples(st.just("u32"), _header_positions(), st.sampled_from(INTERESTING_U64)),
    st.tuples(st.just("u64"), _header_positions(), st.sampled_from(INTERESTING_U64)),
    st.tuples(st.just("truncate"), _header_positions()),
    st.tuples(st.just("insert"), _header_positions(), st.binary(min_size=1, max_size=16).map(bytes.hex)),
).map(list)

texts = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("utf-8", "surrogateescape")),
    st.tuples(st.text(min_size=1, max_size=4), st.integers(1, 30_000)).map(lambda t: t[0] * t[1]),
    st.tuples(st.sampled_from(["7", " ", "\n", "a ", "\t ", "ab", "\u00e9", "\U0001F600", "<|im_start|>"]),
              st.integers(1, 60_000)).map(lambda t: t[0] * t[1]),
)

GBNF_PIECES = ['root ::= ', 'a ::= ', 'b ::= ', '"x"', '"ab"', '"', "[a-z]", "[^x]", "]", "(", ")", "|", "*", "+",
               "?", "{2,3}", "{0,50}", "{0,2000}", "{1,}", "{,7}", "{", "}", "a", "b", "root", " ", "\n", "# c\n",
               "\\x4", "\\u00e9", "\\", ".", "<[5]>", "!", "<t>", "::=", "((", "))"]
_POSTFIX = st.sampled_from(["", "*", "+", "?", "{2}", "{0,3}", "{1,40}", "{0,300}", "{0,2000}", "{5,}"])
_gbnf_expr = st.recursive(
    st.sampled_from(['"x"', '"ab"', "[a-z]", "[^b]", ".", "a", '"\\u00e9"', '""']),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(" ".join),
        st.tuples(inner, inner).map(lambda t: f"({t[0]} | {t[1]})"),
        st.tuples(inner, _POSTFIX).map(lambda t: f"({t[0]}){t[1]}"),
    ),
    max_leaves=8,
)
# Random pieces find parser errors; structured grammars reach the matcher.
gbnf_sources = st.one_of(
    st.lists(st.sampled_from(GBNF_PIECES), max_size=24).map("".join),
    st.tuples(_gbnf_expr, _gbnf_expr).map(lambda t: f"root ::= {t[0]}\na ::= {t[1]}\n"),
)

json_leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                        st.text(max_size=8))
json_values = st.recursive(json_leaves, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=10)

SCHEMA_KEYS = ["type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
               "maxItems", "minLength", "maxLength", "pattern", "format", "enum", "const", "minimum", "maximum",
               "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", "$defs"]
TYPES = ["object", "array", "string", "integer", "number", "boolean", "null"]
REFS = ["#", "#/$defs/a", "#/$defs/b", "#/properties/x", "#/items", "#/$defs/%ZZ", "http://x", "#/$defs/a/items"]
PATTERNS = ["^[a-z]{1,4}$", "(x{0,50}){0,50}", "a|b", "(", "\\d+", "^(ab)*$", "[", "x{2000}", "((((a))))"]


def _schema_value(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(json_values, inner, st.lists(inner, max_size=3), st.sampled_from(TYPES),
                     st.sampled_from(REFS), st.sampled_from(PATTERNS), st.integers(-3, 3000),
                     st.dictionaries(st.sampled_from(["a", "b", "x"]), inner, max_size=3))


schemas = st.recursive(
    st.one_of(st.booleans(), st.fixed_dictionaries({"type": st.sampled_from(TYPES)})),
    lambda inner: st.dictionaries(st.sampled_from(SCHEMA_KEYS), _schema_value(inner), max_size=5),
    max_leaves=12,
)


# ------------------------------------------------------------------ child: run one target

def _case_file(state_dir: Path) -> Path:
    return state_dir / "current-case.json"


def run_target(target: str, seconds: float, seed: int, state_dir: Path) -> dict:
    """Fuzz `target` for about `seconds` in this process; returns the counts.

    Raises the first failure (after Hypothesis has shrunk it).
    """
    context()  # build the engines outside the timed cases
    counts: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    current = _case_file(state_dir)

    def record(case: dict) -> bool:
        if time.monotonic() > deadline:
            return False  # budget spent: the remaining examples are skipped
        current.write_text(json.dumps({"target": target, "case": case}))
        return True

    def count(outcome: str) -> None:
        counts[outcome] = counts.get(outcome, 0) + 1

    # Rounds of a bounded number of examples, each with its own seed, until
    # the time is spent (Hypothesis has no time budget of its own).
    common = settings(max_examples=ROUND_EXAMPLES, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck), print_blob=False)

    if target == "gguf":
        @common
        @given(mutations=st.lists(mutation, min_size=1, max_size=6))
        def fuzz(mutations):
            case = {"mutations": mutations}
            if record(case):
                count(run_case("gguf", case))
    elif target == "tokenizer":
        @common
        @given(text=texts, vocabulary=st.sampled_from(["gpt2", "spm"]))
        def fuzz(text, vocabulary):
            case = {"text": text, "vocabulary": vocabulary}
            if record(case):
                count(run_case("tokenizer", case))
    elif target == "gbnf":
        @common
        @given(source=gbnf_sources, text=st.text(alphabet="xab \n", max_size=60))
        def fuzz(source, text):
            case = {"source": source, "text": text}
            if record(case):
                count(run_case("gbnf", case))
    elif target == "schema":
        @common
        @given(schema=schemas, value=json_values)
        def fuzz(schema, value):
            case = {"schema": schema, "value": value}
            try:
                json.dumps(case, allow_nan=True)
            except (TypeError, ValueError):
                return
            if record(case):
                count(run_case("schema", case))
    else:
        raise ValueError(f"unknown target {target!r}")

    round_index = 0
    while time.monotonic() < deadline:
        hypothesis.seed(seed * 1_000_003 + round_index)(fuzz)()  # reproducible with --seed
        round_index += 1
    current.unlink(missing_ok=True)
    return counts


def _child_main(args: argparse.Namespace) -> int:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))
    state_dir = Path(args.state_dir)
    try:
        counts = run_target(args.target, args.seconds, args.seed, state_dir)
    except BaseException as exc:  # reported to the parent with the failing case
        (state_dir / "failure.txt").write_text(f"{type(exc).__name__}: {exc}")
        raise
    (state_dir / "counts.json").write_text(json.dumps(counts))
    return 0


# ------------------------------------------------------------------ parent: supervise

@dataclass
class FuzzResult:
    target: str
    counts: dict
    failure: str | None
    failing_case: dict | None
    saved_to: Path | None

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def save_regression(target: str, case: dict) -> Path:
    REGRESSIONS.mkdir(exist_ok=True)
    text = json.dumps({"target": target, "case": case}, sort_keys=True)
    path = REGRESSIONS / f"{target}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
    path.write_text(text + "\n")
    return path


def fuzz(target: str, seconds: float, seed: int = 0, save: bool = True) -> FuzzResult:
    """Run one target in a capped child process for about `seconds`."""
    with tempfile.TemporaryDirectory(prefix="muser-fuzz-state-") as state:
        state_dir = Path(state)
        command = [sys.executable, "-m", "tests.hostile.fuzz_harness", "--child", "--target", target,
                   "--seconds", str(seconds), "--seed", str(seed), "--state-dir", state]
        # The child imports the same muser this process can: the installed
        # package in CI, the source tree with a dev build locally.
        try:
            import muser
            package_root = Path(muser.__file__).resolve().parent.parent
        except ImportError:  # run from a source checkout without PYTHONPATH=src
            package_root = REPO / "src"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(package_root), str(REPO),
                                                           os.environ.get("PYTHONPATH", "")]))
        # Startup and shrinking get their own allowance; a case that never
        # returns is caught by this cap.
        hard_cap = seconds + 120 + 4 * CASE_SECONDS
        try:
            proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=hard_cap)
            failure = None if proc.returncode == 0 else (
                (state_dir / "failure.txt").read_text() if (state_dir / "failure.txt").exists()
                else f"exit status {proc.returncode}: {proc.stderr[-2000:]}")
        except subprocess.TimeoutExpired:
            failure = f"a case did not finish within {hard_cap:.0f} s"
        counts_file = state_dir / "counts.json"
        counts = json.loads(counts_file.read_text()) if counts_file.exists() else {}
        case_file = _case_file(state_dir)
        failing = json.loads(case_file.read_text())["case"] if failure and case_file.exists() else None
        saved = save_regression(target, failing) if failing is not None and save else None
        return FuzzResult(target, counts, failure, failing, saved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=TARGETS + ("all",), default="all")
    parser.add_argument("--seconds", type=float, default=600.0, help="fuzzing time per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--state-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(args)
    status = 0
    for target in TARGETS if args.target == "all" else (args.target,):
        result = fuzz(target, args.seconds, args.seed)
        print(f"{target}: {result.total} cases {json.dumps(result.counts, sort_keys=True)}")
        if result.failure:
            status = 1
            print(f"  FAILED: {result.failure}\n  input saved to {result.saved_to}")
    return status


if __name__ == "__main__":
    sys.exit(main())
