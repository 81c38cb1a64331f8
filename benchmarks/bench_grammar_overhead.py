"""Grammar overhead during real generation: ms/token with and without the JSON
grammar, muser next to llama.cpp (llama-cpp-python's LlamaGrammar).

    python benchmarks/bench_grammar_overhead.py [--models smollm2-135m gemma3-270m] [--tokens 48]

Both sides generate greedily from the same chat prompt asking for JSON. The
overhead column is (grammar - plain) / plain. The goal is at most 20% on
smollm2-135m. The per-component costs (check, mask, accept) are in
bench_grammar.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import muser  # noqa: E402
from muser.grammar.json_schema import json_schema_to_gbnf  # noqa: E402
from peer import default_peer_python  # noqa: E402

PEER_SCRIPT = Path(__file__).with_name("peer_grammar.py")
QUESTION = "Describe a fictional city as a JSON object with a name, a population and a list of districts."


def muser_ms_per_token(engine, prompt: list[int], n: int, grammar) -> tuple[float, int]:
    started = time.perf_counter()
    produced = 0
    for chunk in muser.stream(engine, prompt, max_tokens=n, temperature=0, grammar=grammar):
        produced += len(chunk.token_ids)
    return (time.perf_counter() - started) * 1e3 / max(produced, 1), produced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer", default=default_peer_python())
    args = parser.parse_args()
    gbnf = json_schema_to_gbnf(True)  # any JSON value, the same text for both sides
    grammar = muser.Grammar(gbnf)
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as handle:
        handle.write(gbnf)
        grammar_path = handle.name
    print(f"{'model':<14} | {'runtime':<9} | {'plain ms/tok':>12} | {'grammar ms/tok':>14} | {'overhead':>8}")
    for key in args.models:
        path = muser.models.fetch(key)
        engine = muser.Engine(path, threads=args.threads)
        if engine.config.get("chat_template"):
            text = muser.generation.render_chat(engine, [{"role": "user", "content": QUESTION}])
            prompt = engine.tokenize(text, parse_special=True)
        else:
            prompt = engine.tokenize(QUESTION + "\n")
        muser_ms_per_token(engine, prompt, 4, grammar)  # warm up (trie, state cache)
        plain, _ = muser_ms_per_token(engine, prompt, args.tokens, None)
        constrained, _ = muser_ms_per_token(engine, prompt, args.tokens, grammar)
        print(f"{key:<14} | {'muser':<9} | {plain:12.2f} | {constrained:14.2f} | {(constrained - plain) / plain:8.1%}")
        if args.peer:
            done = subprocess.run([args.peer, str(PEER_SCRIPT), str(path), grammar_path, json.dumps(prompt),
                                   str(args.tokens), str(args.threads)], capture_output=True, text=True, check=True)
            peer = json.loads(done.stdout)
            p, g = peer["plain_ms_per_token"], peer["grammar_ms_per_token"]
            print(f"{key:<14} | {'llama.cpp':<9} | {p:12.2f} | {g:14.2f} | {(g - p) / p:8.1%}")


if __name__ == "__main__":
    main()
