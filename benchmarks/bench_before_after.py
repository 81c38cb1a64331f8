"""Two builds of muser side by side on the CPU: is any cell slower than before?

Each build is a `src` folder holding an importable `muser` (with its built
extension), for example a worktree of an older commit after
`/work/dev-build.sh`. The builds run in separate processes, in alternating
rounds (the order swapped every round, since a shared machine's load drifts),
and the best run of each cell is kept per build. Cells: prefill of 128 and
512 tokens, 64 decode steps after a 128-token prompt, and decode groups of
1..4 rows (48 steps after 16-token prompts).

    python benchmarks/bench_before_after.py OLD/src NEW/src MODEL.gguf [MODEL.gguf ...] \\
        [--threads 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

# Runs in the child process with one build first on sys.path; prints one JSON line of tok/s per cell.
CELLS = r'''
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import muser
threads, res = int(sys.argv[2]), {}
for path in sys.argv[3:]:
    name = path.rsplit("/", 1)[-1]
    engine = muser.Engine(path, threads=threads)
    tokens = [int(t) for t in np.random.default_rng(1).integers(300, engine.n_vocab, 512)]
    for n in (128, 512):
        s = engine.session(max_context=2048)
        start = time.perf_counter()
        s.prefill(tokens[:n])
        res[f"{name} prefill {n}"] = n / (time.perf_counter() - start)
    s = engine.session(max_context=2048)
    s.prefill(tokens[:128])
    start = time.perf_counter()
    for tok in tokens[128:192]:
        s.decode(tok)
    res[f"{name} decode"] = 64 / (time.perf_counter() - start)
    for rows in (1, 2, 3, 4):
        sessions = [engine.session(max_context=256) for _ in range(rows)]
        for x in sessions:
            x.prefill(tokens[:16])
        start = time.perf_counter()
        for tok in tokens[16:64]:
            engine.decode_group(sessions, [tok] * rows)
        res[f"{name} group {rows}"] = rows * 48 / (time.perf_counter() - start)
print(json.dumps(res))
'''


def run_build(site: str, threads: int, models: list[str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CELLS, site, str(threads), *models], capture_output=True,
                         text=True, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    if out.returncode != 0:
        raise SystemExit(f"the build in {site} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", help="src folder of the build before")
    ap.add_argument("new", help="src folder of the build after")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    best: dict[str, dict[str, float]] = {"old": {}, "new": {}}
    for r in range(args.rounds):
        order = [("old", args.old), ("new", args.new)]
        for name, site in order if r % 2 == 0 else order[::-1]:
            for cell, rate in run_build(site, args.threads, args.models).items():
                best[name][cell] = max(rate, best[name].get(cell, 0.0))
    print(f"{args.threads} threads, best of {args.rounds} alternating rounds, tokens/s")
    print(f"{'cell':44s} {'before':>9s} {'after':>9s} {'after/before':>13s}")
    for cell, before in best["old"].items():
        after = best["new"][cell]
        print(f"{cell:44s} {before:9.1f} {after:9.1f} {after / before:13.3f}")


if __name__ == "__main__":
    main()
