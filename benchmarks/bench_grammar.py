"""Per-token cost of grammar-constrained sampling with the JSON grammar. Prints tables.

    python benchmarks/bench_grammar.py                       # gpt-2 vocab (50k) + synthetic 262k
    python benchmarks/bench_grammar.py --gguf A.gguf B.gguf  # the vocabularies of real models

Decode traces are JSON documents tokenized greedily (longest match) against each
vocabulary; every token of a trace is then fed to a GrammarConstraint as a
sampler would:

- check: the fast path `check(token)` (what runs when the sampled token is allowed)
- accept: `accept(token)` (runs every step)
- mask:  the full mask `mask()` (runs only when the sampled token is rejected);
         "walk" is the trie walk alone with no per-state cache, "cold" the first
         generation with a fresh Grammar, "warm" a second generation (shared cache)
- apply: `apply(logits)` on a float32 vector given the mask

Vocabularies are read with the test helper tests/unit/grammar/grammar_test_vocab.py
(token texts -> bytes; control tokens -> b""), not with muser's tokenizer.

Numbers are ms or µs per token (mean over the trace; min of --repeat runs for
the walk). Also measured: how the recognizer's state table grows on a long
output (states, MB), the bounded-state claim of the recognizer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit" / "grammar"))

from grammar_test_vocab import greedy_tokenize, load_token_bytes, synthetic_vocab  # noqa: E402

from muser.grammar import Grammar, GrammarConstraint, TokenTrie  # noqa: E402
from muser.grammar import token_mask  # noqa: E402

DOCS = [
    {
        "name": "Alice Smith", "age": 34, "email": "alice@example.com",
        "tags": ["admin", "dev", "ops"],
        "address": {"street": "123 Main St", "city": "Springfield", "zip": "12345"},
        "scores": [1.5, 2.25, -3e5], "active": True, "notes": "Ünïcödé 日本語 text",
    },
    [{"id": i, "title": f"Item number {i}", "price": round(9.99 * i, 2), "in_stock": i % 3 != 0,
      "dims": {"w": i * 1.5, "h": 2 * i}} for i in range(1, 8)],
    {"query": "What is the capital of France?", "answer": "Paris",
     "sources": [{"url": "https://en.wikipedia.org/wiki/Paris", "score": 0.98}],
     "confidence": 0.92, "followups": ["population", "history", "landmarks"]},
]


def traces(vocab: list[bytes]) -> list[list[int]]:
    out = []
    for i, doc in enumerate(DOCS):
        text = json.dumps(doc, ensure_ascii=False, indent=2 if i == 1 else None)
        if isinstance(doc, list):
            text = json.dumps({"items": doc}, ensure_ascii=False, indent=2)
        out.append(greedy_tokenize(text.encode(), vocab))
    return out


STATE_PREFIXES = [
    ("start", ""),
    ("after a brace", "{"),
    ("inside a key", '{"na'),
    ("value start", '{"name": '),
    ("inside a string value", '{"name": "Al'),
    ("inside a number", '{"n": 12'),
    ("after a value", '{"n": 12, "b": true'),
]


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def per_token(fn, tokens) -> float:
    start = time.perf_counter()
    for t in tokens:
        fn(t)
    return (time.perf_counter() - start) / max(len(tokens), 1)


def run_generation(grammar: Grammar, trie: TokenTrie, eog: list[int], trace: list[int]) -> dict:
    """Feed one trace; time check/accept per token, and mask at every position."""
    gc = GrammarConstraint(grammar, trie, eog)
    check_s, accept_s, mask_s = [], [], []
    for tok in trace:
        t0 = time.perf_counter()
        ok = gc.check(tok)
        t1 = time.perf_counter()
        mask = gc.mask()
        t2 = time.perf_counter()
        gc.accept(tok)
        t3 = time.perf_counter()
        if not ok or not mask[tok]:
            raise AssertionError(f"trace token {tok} rejected")
        check_s.append(t1 - t0)
        mask_s.append(t2 - t1)
        accept_s.append(t3 - t2)
    return {"check": check_s, "mask": mask_s, "accept": accept_s}


def check_only_generation(grammar: Grammar, trie: TokenTrie, eog: list[int], trace: list[int]) -> list[float]:
    """The fast path alone (no masks): cold rows are filled along the sampled tokens only."""
    gc = GrammarConstraint(grammar, trie, eog)
    out = []
    for tok in trace:
        t0 = time.perf_counter()
        ok = gc.check(tok)
        gc.accept(tok)
        out.append(time.perf_counter() - t0)
        if not ok:
            raise AssertionError("trace token rejected")
    return out


def uncached_walks(grammar: Grammar, trie: TokenTrie, trace: list[int], repeat: int) -> list[float]:
    """The trie walk alone at every position of the trace, rows already filled (min of `repeat`)."""
    st = grammar.state()
    out = []
    for tok in trace:
        auto, sid = st.automaton, st.state_id
        token_mask._walk(trie, auto, sid)  # fills rows
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            token_mask._walk(trie, auto, sid)
            best = min(best, time.perf_counter() - t0)
        out.append(best)
        st.accept_bytes(trie.token_bytes[tok])
    return out


def long_output(grammar: Grammar, trie: TokenTrie, eog: list[int], records: int) -> dict:
    record = {"id": 123, "name": "record name", "tags": ["x", "y"], "value": 4.5, "ok": False}
    text = json.dumps({"rows": [dict(record, id=i) for i in range(records)]})
    tokens = greedy_tokenize(text.encode(), trie.token_bytes)
    tracemalloc.start()
    gc = GrammarConstraint(grammar, trie, eog)
    auto = gc.state.automaton
    marks = {}
    heap = {}
    t0 = time.perf_counter()
    for i, tok in enumerate(tokens):
        gc.accept(tok)
        if i + 1 in (len(tokens) // 10, len(tokens)):
            marks[i + 1] = auto.state_count
            heap[i + 1] = tracemalloc.get_traced_memory()[0] / 2**20
    elapsed = time.perf_counter() - t0
    tracemalloc.stop()
    return {
        "bytes": len(text), "tokens": len(tokens), "states": marks, "heap_mb": heap,
        "table_mb": auto.table.nbytes / 2**20, "us_per_token": elapsed / len(tokens) * 1e6,
        "can_end": gc.can_end(),
    }


def ms(values) -> str:
    return f"{statistics.mean(values) * 1e3:7.3f}"


def us(values) -> str:
    return f"{statistics.mean(values) * 1e6:7.1f}"


_FRESH = iter(range(1, 1 << 30))


def fresh_json_grammar() -> Grammar:
    """Grammar.json() with a state table of its own (grammars with equal text share one)."""
    return Grammar(Grammar.json().text + f"# fresh table {next(_FRESH)}\n")


def bench_vocab(name: str, vocab: list[bytes], eog: list[int], repeat: int) -> None:
    t0 = time.perf_counter()
    trie = TokenTrie(vocab)
    build = time.perf_counter() - t0
    print(f"\n## {name}: {len(vocab)} tokens, trie {trie.n_nodes} nodes, depth {trie.max_depth}, built in {build:.2f} s")
    runs = traces(vocab)
    print(f"traces: {[len(r) for r in runs]} tokens")
    grammar = fresh_json_grammar()
    cold = [run_generation(grammar, trie, eog, r) for r in runs]  # first generation: fresh caches
    warm = [run_generation(grammar, trie, eog, r) for r in runs]  # same Grammar again
    fresh_check = [check_only_generation(fresh_json_grammar(), trie, eog, r) for r in runs]
    walks = [uncached_walks(grammar, trie, r, repeat) for r in runs]
    logits = np.zeros(len(vocab), dtype=np.float32)
    gc = GrammarConstraint(grammar, trie, eog)
    gc.accept(runs[0][0])
    gc.apply(logits.copy())
    t0 = time.perf_counter()
    for _ in range(20):
        gc.apply(logits.copy())
    apply_s = (time.perf_counter() - t0) / 20

    def flat(key, runs_):
        return [v for run in runs_ for v in run[key]]

    all_walks = [w for run in walks for w in run]
    print("| path | per token |")
    print("|---|---|")
    print(f"| check, fresh grammar, check+accept only (µs) | {us([v for r in fresh_check for v in r])} |")
    print(f"| check, warm (µs) | {us(flat('check', warm))} |")
    print(f"| accept, warm (µs) | {us(flat('accept', warm))} |")
    print(f"| mask, cold: first generation (ms) | {ms(flat('mask', cold))} |")
    print(f"| mask, warm: cached per state (ms) | {ms(flat('mask', warm))} |")
    print(f"| walk without cache: mean / median / max (ms) | {ms(all_walks)} / "
          f"{statistics.median(all_walks) * 1e3:.3f} / {max(all_walks) * 1e3:.3f} |")
    print(f"| apply(logits) given the mask (ms) | {apply_s * 1e3:7.3f} |")
    print("| uncached walk at a JSON state | allowed tokens | ms (min of repeats) |")
    print("|---|---|---|")
    for label, prefix in STATE_PREFIXES:
        st = grammar.state()
        st.accept_bytes(prefix.encode())
        allowed = int(token_mask._walk(trie, st.automaton, st.state_id).sum())
        best = min(_timed(lambda: token_mask._walk(trie, st.automaton, st.state_id)) for _ in range(repeat))
        print(f"| {label} `{prefix}` | {allowed} | {best * 1e3:.3f} |")
    auto = grammar.automaton()
    print(f"states after the traces: {auto.state_count}, table {auto.table.nbytes / 2**20:.1f} MB")
    for rate in (0.05, 0.2):
        per = statistics.mean(flat("check", warm)) + statistics.mean(flat("accept", warm)) + rate * (
            statistics.mean(all_walks) + apply_s)
        print(f"estimated grammar cost at {rate:.0%} rejections, uncached masks: {per * 1e3:.3f} ms/token")
    lo = long_output(fresh_json_grammar(), trie, eog, records=1500)
    heap = ", ".join(f"{v:.2f}" for v in lo["heap_mb"].values())
    print(f"long output: {lo['bytes']} bytes, {lo['tokens']} tokens; states after 10% / 100% of it: "
          f"{', '.join(str(v) for v in lo['states'].values())}; Python heap allocated since the start "
          f"after 10% / 100%: {heap} MB (table {lo['table_mb']:.1f} MB); accept {lo['us_per_token']:.1f} "
          f"µs/token (tracemalloc on); ends: {lo['can_end']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", nargs="*", default=[], help="GGUF files whose vocabularies to use")
    parser.add_argument("--repeat", type=int, default=3, help="repeats per uncached walk (min is kept)")
    args = parser.parse_args()
    if args.gguf:
        for path in args.gguf:
            vocab, eog = load_token_bytes(path)
            bench_vocab(Path(path).name, vocab, eog, args.repeat)
        return
    gpt2 = ROOT / "tests" / "fixtures" / "reference" / "tokenizer" / "ggml-vocab-gpt-2.gguf"
    vocab, eog = load_token_bytes(gpt2)
    bench_vocab("gpt-2 vocabulary", vocab, eog, args.repeat)
    synthetic = synthetic_vocab(262_144, seed=1)
    bench_vocab("synthetic 262k vocabulary", synthetic + [b""], [len(synthetic)], args.repeat)


if __name__ == "__main__":
    main()
