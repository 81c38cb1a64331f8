"""CPU time per token of muser's three CPU cells on a real model: prefill 512,
single-row decode and a four-row decode group. CPU time (time.process_time)
is what stays comparable on a shared machine where wall time swings 2x; run
two builds alternately (PYTHONPATH=<tree>/src) to compare them.

    python benchmarks/bench_cpu_time_cells.py smollm2-135m [--threads 2] [--reps 6]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's BLAS threads would spin beside ours

import muser  # noqa: E402
import muser.models  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a muser.models key (smollm2-135m, gemma3-270m) or a GGUF path")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=6, help="repetitions of each cell; the best is printed")
    args = parser.parse_args()
    path = args.model if args.model.endswith(".gguf") else muser.models.fetch(args.model)
    engine = muser.Engine(path, threads=args.threads)
    prompt = engine.tokenize("The quick brown fox jumps over the lazy dog. " * 60)[:512]
    session = engine.session(max_context=1024)
    session.prefill(prompt[:8])

    rows = [engine.session(max_context=512) for _ in range(4)]

    # Each returns CPU ms per token of its timed part.
    def prefill() -> float:
        session.truncate(0)
        start = time.process_time()
        session.prefill(prompt)
        return 1e3 * (time.process_time() - start) / 512

    def decode() -> float:
        session.truncate(0)
        session.prefill(prompt[:128])
        token = int(session.logits.argmax())
        start = time.process_time()
        for _ in range(32):
            session.decode(token)
            token = int(session.logits.argmax())
        return 1e3 * (time.process_time() - start) / 32

    def group() -> float:
        for row in rows:
            row.truncate(0)
            row.prefill(prompt[:64])
        start = time.process_time()
        for _ in range(12):
            engine.decode_group(rows, [int(row.logits.argmax()) for row in rows])
        return 1e3 * (time.process_time() - start) / 48

    cells = {"prefill 512": prefill, "decode": decode, "4-row group": group}
    best = {cell: min(run() for _ in range(args.reps)) for cell, run in cells.items()}
    name = os.path.basename(str(path))
    print(f"{name} threads={args.threads} CPU ms/token, best of {args.reps}: "
          + ", ".join(f"{cell} {ms:.2f}" for cell, ms in best.items()))


if __name__ == "__main__":
    main()
