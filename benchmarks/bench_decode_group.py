"""Aggregate decode throughput with 1..4 rows per decode group, side by side with
llama.cpp decoding the same number of parallel sequences in one batch.

    python benchmarks/bench_decode_group.py [--models smollm2-135m gemma3-270m] [--steps 48]

Both sides use 2 threads and the same prompt tokens; each row is fed its own
greedy token. The table shows tokens/s summed over rows, the speed-up over one
row, and muser / llama.cpp.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import muser  # noqa: E402
from peer import default_peer_python, run_peer  # noqa: E402

PROMPT = "The history of written numbers is a story of slow, uneven progress."


def muser_rows(engine: muser.Engine, prompt: list[int], rows: int, steps: int, reps: int) -> float:
    best = 0.0
    for _ in range(reps):
        sessions = [engine.session(max_context=len(prompt) + steps + 8) for _ in range(rows)]
        for s in sessions:
            s.prefill(prompt)
        tokens = [int(np.argmax(s.logits)) for s in sessions]
        started = time.perf_counter()
        for _ in range(steps):
            engine.decode_group(sessions, tokens)
            tokens = [int(np.argmax(s.logits)) for s in sessions]
        best = max(best, rows * steps / (time.perf_counter() - started))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer", default=default_peer_python(), help="the peer venv's python (llama-cpp-python)")
    args = parser.parse_args()
    for key in args.models:
        path = muser.models.fetch(key)
        engine = muser.Engine(path, threads=args.threads)
        prompt = engine.tokenize(PROMPT)
        ours = {rows: muser_rows(engine, prompt, rows, args.steps, args.reps) for rows in (1, 2, 3, 4)}
        theirs: dict[int, float] = {}
        if args.peer:
            tasks = [{"kind": "parallel_decode", "prompt": prompt, "n_seq": rows, "n_steps": args.steps,
                      "reps": args.reps} for rows in (1, 2, 3, 4)]
            for rows, result in zip((1, 2, 3, 4), run_peer(args.peer, str(path), tasks, threads=args.threads)):
                theirs[rows] = result["tokens_per_s"]
        print(f"\n{key}: aggregate decode tokens/s, {args.threads} threads, {args.steps} steps")
        print(f"{'rows':>4} | {'muser':>8} | {'x 1 row':>7} | {'llama.cpp':>9} | {'muser/llama.cpp':>15}")
        for rows in (1, 2, 3, 4):
            peer = theirs.get(rows)
            ratio = f"{ours[rows] / peer:15.2f}" if peer else f"{'-':>15}"
            peer_text = f"{peer:9.1f}" if peer else f"{'-':>9}"
            print(f"{rows:>4} | {ours[rows]:8.1f} | {ours[rows] / ours[1]:7.2f} | {peer_text} | {ratio}")


if __name__ == "__main__":
    main()
