"""llama.cpp's side of bench_grammar_overhead.py (run under the peer's python).

    PEER_PYTHON benchmarks/peer_grammar.py MODEL GRAMMAR.gbnf PROMPT_TOKENS_JSON N_TOKENS THREADS

Greedy-generates N tokens from the prompt with and without LlamaGrammar and
prints JSON {"plain_ms_per_token", "grammar_ms_per_token", "tokens"}.
"""

from __future__ import annotations

import json
import sys
import time

import llama_cpp


def timed(llm, prompt, n, grammar):
    llm.reset()
    started = time.perf_counter()
    produced = 0
    for _ in llm.generate(prompt, temp=0.0, top_k=1, grammar=grammar, reset=True):
        produced += 1
        if produced >= n:
            break
    return (time.perf_counter() - started) * 1e3 / max(produced, 1), produced


def main() -> None:
    model, grammar_path, prompt_json, n, threads = sys.argv[1:6]
    prompt, n, threads = json.loads(prompt_json), int(n), int(threads)
    llm = llama_cpp.Llama(model_path=model, n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False)
    grammar = llama_cpp.LlamaGrammar.from_string(open(grammar_path).read(), verbose=False)
    timed(llm, prompt, 4, None)  # warm up
    plain, _ = timed(llm, prompt, n, None)
    constrained, produced = timed(llm, prompt, n, grammar)
    json.dump({"plain_ms_per_token": plain, "grammar_ms_per_token": constrained, "tokens": produced}, sys.stdout)


if __name__ == "__main__":
    main()
