"""The llama.cpp side of muser's side-by-side benchmarks.

Run under the peer's interpreter (llama-cpp-python built from source by
../shared/tools/peer-venv.sh); muser's benchmark scripts call it as a
subprocess so both run in the same benchmark invocation:

    PEER_PYTHON benchmarks/peer_llama_cpp.py < spec.json > result.json

spec: {"model": PATH, "threads": 2, "n_ctx": 4096,
       "tasks": [{"kind": "prefill", "tokens": [...], "reps": 3},
                 {"kind": "decode", "prompt": [...], "n_steps": 64, "reps": 1},
                 {"kind": "parallel_decode", "prompt": [...], "n_seq": 4, "n_steps": 32, "reps": 1}]}
Each result: {"kind", "tokens_per_s" (best of reps), "seconds" (all reps)}.
Decode feeds llama.cpp's own argmax back, like a greedy generation; parallel
decode advances n_seq sequences with one batch of n_seq rows per step.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import llama_cpp as L


class Peer:
    def __init__(self, model_path: str, threads: int, n_ctx: int, n_seq_max: int = 4):
        L.llama_backend_init()
        self.model = L.llama_model_load_from_file(model_path.encode(), L.llama_model_default_params())
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {model_path}")
        params = L.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = 512
        params.n_ubatch = 512
        params.n_seq_max = n_seq_max
        params.n_threads = threads
        params.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(self.model, params)
        self.memory = L.llama_get_memory(self.ctx)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.batch = L.llama_batch_init(512, 0, n_seq_max)

    def clear(self) -> None:
        L.llama_memory_clear(self.memory, True)

    def decode(self, rows: list[tuple[int, int, int, bool]]) -> None:
        """rows: (token, position, sequence, wants_logits)."""
        batch = self.batch
        batch.n_tokens = len(rows)
        for i, (token, pos, seq, logits) in enumerate(rows):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = logits
        status = L.llama_decode(self.ctx, batch)
        if status != 0:
            raise SystemExit(f"llama_decode failed with {status}")

    def argmax(self, index: int) -> int:
        pointer = L.llama_get_logits_ith(self.ctx, index)
        return int(np.argmax(np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))))

    def prefill(self, tokens: list[int], seq: int = 0, start: int = 0) -> None:
        for at in range(0, len(tokens), 512):
            chunk = tokens[at:at + 512]
            last = at + len(chunk) == len(tokens)
            self.decode([(t, start + at + i, seq, last and i == len(chunk) - 1) for i, t in enumerate(chunk)])


def run_prefill(peer: Peer, task) -> float:
    peer.clear()
    started = time.perf_counter()
    peer.prefill(task["tokens"])
    return len(task["tokens"]) / (time.perf_counter() - started)


def run_decode(peer: Peer, task) -> float:
    peer.clear()
    prompt = task["prompt"]
    peer.prefill(prompt)
    token, pos = peer.argmax(-1), len(prompt)
    started = time.perf_counter()
    for _ in range(task["n_steps"]):
        peer.decode([(token, pos, 0, True)])
        token, pos = peer.argmax(-1), pos + 1
    return task["n_steps"] / (time.perf_counter() - started)


def run_parallel_decode(peer: Peer, task) -> float:
    peer.clear()
    prompt, n_seq = task["prompt"], task["n_seq"]
    for seq in range(n_seq):
        peer.prefill(prompt, seq=seq)
    tokens = [peer.argmax(-1)] * n_seq
    pos = len(prompt)
    started = time.perf_counter()
    for _ in range(task["n_steps"]):
        peer.decode([(tokens[s], pos, s, True) for s in range(n_seq)])
        tokens = [peer.argmax(s) for s in range(n_seq)]
        pos += 1
    return n_seq * task["n_steps"] / (time.perf_counter() - started)


RUNNERS = {"prefill": run_prefill, "decode": run_decode, "parallel_decode": run_parallel_decode}


def main() -> None:
    spec = json.load(sys.stdin)
    peer = Peer(spec["model"], spec.get("threads", 2), spec.get("n_ctx", 4096))
    results = []
    for task in spec["tasks"]:
        rates, seconds = [], []
        for _ in range(task.get("reps", 1)):
            started = time.perf_counter()
            rates.append(RUNNERS[task["kind"]](peer, task))
            seconds.append(time.perf_counter() - started)
        results.append({"kind": task["kind"], "tokens_per_s": max(rates), "seconds": seconds,
                        "version": L.__version__})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
