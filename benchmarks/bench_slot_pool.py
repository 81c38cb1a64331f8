"""Four concurrent greedy generations through one SlotPool (Python threads)
versus the same four run one after another, plus llama.cpp decoding four
parallel sequences in one batch.

    python benchmarks/bench_slot_pool.py [--models smollm2-135m gemma3-270m] [--tokens 64]

Reports generated tokens/s for both muser modes, their ratio, and per-token
latency (time between successive tokens of one request) p50/p99.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import muser  # noqa: E402
from peer import default_peer_python, run_peer  # noqa: E402

PROMPTS = [
    "The river wound through the valley,",
    "In the old workshop, the clockmaker",
    "Every spring the farmers of the plain",
    "The first rule of mountain travel is",
]


def run_one(pool: muser.SlotPool, prompt: str, tokens: int, gaps: list[float]) -> int:
    last = time.perf_counter()
    produced = 0
    for chunk in muser.stream(pool, prompt, max_tokens=tokens, temperature=0, stop_token_ids=()):
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
        produced += len(chunk.token_ids)
    return produced


def measure(pool: muser.SlotPool, tokens: int, concurrent: bool) -> tuple[float, list[float]]:
    gaps: list[float] = []
    counts = [0] * len(PROMPTS)
    started = time.perf_counter()
    if concurrent:
        def work(i: int) -> None:
            counts[i] = run_one(pool, PROMPTS[i], tokens, gaps)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for i, prompt in enumerate(PROMPTS):
            counts[i] = run_one(pool, prompt, tokens, gaps)
    return sum(counts) / (time.perf_counter() - started), gaps[len(PROMPTS):]  # drop first-token gaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--window-us", type=float, default=250.0, help="the pool's decode batching window")
    parser.add_argument("--peer", default=default_peer_python())
    args = parser.parse_args()
    for key in args.models:
        path = muser.models.fetch(key)
        engine = muser.Engine(path, threads=args.threads)
        pool = muser.SlotPool(engine, slots=4, max_context=512, batch_window_us=args.window_us)
        measure(pool, 8, concurrent=True)  # warm up
        seq_tps, seq_gaps = measure(pool, args.tokens, concurrent=False)
        con_tps, con_gaps = measure(pool, args.tokens, concurrent=True)
        peer_tps = None
        if args.peer:
            prompt = engine.tokenize(PROMPTS[0])
            (result,) = run_peer(args.peer, str(path), [{"kind": "parallel_decode", "prompt": prompt, "n_seq": 4,
                                                         "n_steps": args.tokens, "reps": 1}], threads=args.threads)
            peer_tps = result["tokens_per_s"]
        groups = pool.stats()["batcher"]["group_size_counts"]
        print(f"\n{key}: 4 greedy generations of {args.tokens} tokens, {args.threads} threads, "
              f"batch window {args.window_us:g} us")
        print(f"{'mode':<28} | {'tokens/s':>8} | {'p50 ms/token':>12} | {'p99 ms/token':>12}")
        for name, tps, gaps in (("one after another", seq_tps, seq_gaps), ("4 concurrent (SlotPool)", con_tps, con_gaps)):
            p50, p99 = np.percentile(np.array(gaps) * 1e3, [50, 99])
            print(f"{name:<28} | {tps:8.1f} | {p50:12.2f} | {p99:12.2f}")
        if peer_tps:
            print(f"{'llama.cpp 4 parallel seqs':<28} | {peer_tps:8.1f} | {'-':>12} | {'-':>12}")
        print(f"concurrent / sequential: {con_tps / seq_tps:.2f}x" +
              (f"; concurrent muser / llama.cpp: {con_tps / peer_tps:.2f}x" if peer_tps else ""))
        print(f"decode group sizes seen (index = rows): {groups}")


if __name__ == "__main__":
    main()
