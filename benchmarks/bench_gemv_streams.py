"""Decode-sized packed matmuls reading 1, 2 or 4 weight groups side by side
(muser._core._testing.set_gemv_streams; kernel_set.h says why the count
matters and how the default is chosen). Every count gives the same bits;
only speed differs, and by CPU: this is the check to run on a new machine.

    python benchmarks/bench_gemv_streams.py                       # kernels only
    python benchmarks/bench_gemv_streams.py --model l1b-Q4_0.gguf --threads 1,4,16

Kernel rows: best-of-N ms of one matmul of `--rows` activation rows on a
fresh random weight per shape (2048x128256 streams a 148 MB Q4_0 table from
memory), 1 thread. Model rows: single-row decode after a 64-token prompt,
wall and CPU ms per step; each (threads, streams) cell loads its own engine
(chunks are planned for the stream count at load) and the counts alternate
within each round, so a busy machine disturbs them alike.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import muser
from muser._core import _testing as t

from random_weights import TYPES, random_activations, random_weight


def kernel_rows(types, shapes, rows, streams, rounds, min_seconds):
    print(f"default streams on this CPU: {t.gemv_streams()}")
    print(f"{'type':6} {'in x out':>12} {'rows':>4} " + " ".join(f"{'s=' + str(s) + ' ms':>10}" for s in streams))
    for name in types:
        type_id = TYPES[name][0]
        for shape in shapes:
            n_in, n_out = (int(v) for v in shape.split("x"))
            raw = random_weight(name, n_in, n_out)
            for r in rows:
                x = random_activations(r, n_in)
                best = {s: float("inf") for s in streams}
                for _ in range(rounds):
                    for s in streams:
                        t.set_gemv_streams(s)
                        probe = t.time_matmul(type_id, raw, n_in, n_out, x, 1, "best", 1, True)[0]
                        reps = max(3, min(500, int(min_seconds / max(probe, 1e-7))))
                        best[s] = min(best[s], min(t.time_matmul(type_id, raw, n_in, n_out, x, 1, "best", reps, True)))
                print(f"{name:6} {shape:>12} {r:>4} " + " ".join(f"{best[s] * 1e3:10.3f}" for s in streams), flush=True)
    t.set_gemv_streams(0)


def model_rows(path, threads_list, streams, rounds, steps):
    prompt_len = 64
    print(f"{path}: decode after {prompt_len} tokens, {steps} steps; wall / CPU ms per step, best of {rounds}")
    for threads in threads_list:
        wall = {s: [] for s in streams}
        cpu = {s: [] for s in streams}
        for _ in range(rounds):
            for s in streams:
                t.set_gemv_streams(s)
                engine = muser.Engine(path, threads=threads)
                rng = np.random.default_rng(1)
                tokens = [int(v) for v in rng.integers(3, engine.n_vocab, prompt_len + steps + 1)]
                session = engine.session(max_context=prompt_len + steps + 8)
                session.prefill(tokens[:prompt_len])
                session.decode(tokens[prompt_len])
                c0, w0 = time.process_time(), time.perf_counter()
                for token in tokens[prompt_len + 1:]:
                    session.decode(token)
                wall[s].append((time.perf_counter() - w0) / steps * 1e3)
                cpu[s].append((time.process_time() - c0) / steps * 1e3)
                del session, engine
        cells = " ".join(f"s={s}: {min(wall[s]):7.2f} / {min(cpu[s]):7.2f}" for s in streams)
        print(f"threads {threads:>2}  {cells}", flush=True)
    t.set_gemv_streams(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", default="Q4_0,Q4_K,Q8_0")
    parser.add_argument("--shapes", default="2048x128256,2048x8192,8192x2048")
    parser.add_argument("--rows", default="1,4")
    parser.add_argument("--streams", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=0.2, help="time budget per kernel measurement")
    parser.add_argument("--model", help="a GGUF to decode with each stream count")
    parser.add_argument("--threads", default="1,4")
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    if args.types:
        kernel_rows(args.types.split(","), args.shapes.split(","), [int(r) for r in args.rows.split(",")],
                    streams, args.rounds, args.min_seconds)
    if args.model:
        model_rows(args.model, [int(v) for v in args.threads.split(",")], streams, args.rounds, args.steps)


if __name__ == "__main__":
    main()
