"""Throughput of muser's CPU matmul per weight type, instruction set, shape,
batch size and thread count. Prints a table (GFLOP/s and GB/s of weight).

    python benchmarks/bench_kernels.py                     # default sweep
    python benchmarks/bench_kernels.py --types Q4_1,Q8_0 --rows 1,4 --threads 1
    python benchmarks/bench_kernels.py --peer ../peer-venv/bin/python   # side by side with ggml
    python benchmarks/bench_kernels.py --types Q4_0 --layouts plain,packed   # before/after repacking

--layouts: `packed` repacks the weight as the engine does at load when the
instruction set has an interleaved layout for the type (else it is the same
as `plain`, the GGUF blocks); each (shape, rows, threads) case times the
layouts back to back, so a loaded machine disturbs both alike.

Timing is in C++ (one thread pool per configuration, one warm-up call), so
Python overhead is not included. On a shared machine prefer the best-of-N
column; the median shows how much other load disturbed the run.

Weights are random valid blocks (fp16 scales set to sane values). Small
shapes stay in cache across repeats, so they measure compute; the
576x49152 shape (the smollm2 output projection) streams from memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess

from muser._core import _testing as t

from random_weights import TYPES, random_activations, random_weight

# (n_in, n_out): smollm2's projections and output layer; K-quants need a
# multiple of 256 inputs, so they also get gemma3-like 2048x640 / 1024x2048.
SHAPES = [(576, 576), (576, 1536), (1536, 576), (576, 49152), (2048, 640), (1024, 2048)]
DEFAULT_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                 "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]


def run_peer(peer_python: str, cases: list[dict], min_seconds: float) -> list[dict]:
    """ggml's timings for `cases` (see peer_ggml_matmul.py)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer_ggml_matmul.py")
    spec = json.dumps({"min_seconds": min_seconds, "cases": cases})
    done = subprocess.run([peer_python, script], input=spec, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", default=",".join(DEFAULT_TYPES))
    parser.add_argument("--isas", default="best", help="comma list of scalar/avx2/avx512/avx512vnni/avx512amx/neon/neon_dotprod/neon_i8mm/best, or 'all'")
    parser.add_argument("--rows", default="1,4,128")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--shapes", default=",".join(f"{a}x{b}" for a, b in SHAPES))
    parser.add_argument("--layouts", default="packed", help="comma list of packed/plain (see above)")
    parser.add_argument("--splits", default="2d",
                        help="comma list of 2d/1d: calls of 64+ rows cut into row blocks x output chunks (2d, what "
                             "matmul does) or into output chunks over all rows (1d, the split before); 1d rows are "
                             "labelled LAYOUT/1d")
    parser.add_argument("--min-seconds", type=float, default=0.2, help="time budget per measurement")
    parser.add_argument("--peer", metavar="PYTHON",
                        help="also time ggml (llama.cpp's kernels) with this interpreter, e.g. ../peer-venv/bin/python; "
                             "speedup = ggml time / muser time")
    args = parser.parse_args()

    isas = t.cpu_isas() if args.isas == "all" else [s if s != "best" else t.best_isa() for s in args.isas.split(",")]
    print(f"CPU kernel sets available: {t.cpu_isas()}; best = {t.best_isa()}")
    print("ms = best of N calls (median in brackets); GFLOP/s and GB/s of weight from the best.")
    peer_cols = f" {'ggml ms':>9} {'(median)':>10} {'speedup':>10}" if args.peer else ""
    layouts = args.layouts.split(",")
    print(f"{'type':6} {'isa':10} {'layout':9} {'in x out':>10} {'rows':>5} {'thr':>3} {'ms':>9} {'(median)':>10} "
          f"{'GFLOP/s':>8} {'GB/s(w)':>8}{peer_cols}")
    for name in args.types.split(","):
        type_id, elems, nbytes = TYPES[name]
        lines, cases = [], []
        for shape in args.shapes.split(","):
            n_in, n_out = (int(v) for v in shape.split("x"))
            if n_in % elems:
                print(f"{name:6} {'-':10} {shape:>10}  skipped: input size not a multiple of {elems}")
                continue
            raw = random_weight(name, n_in, n_out)
            w_bytes = n_in * n_out // elems * nbytes
            for isa in isas:
                for rows in (int(r) for r in args.rows.split(",")):
                    x = random_activations(rows, n_in)
                    for threads in (int(v) for v in args.threads.split(",")):
                      for layout, split in ((lay, sp) for lay in layouts for sp in args.splits.split(",")):
                        if layout == "packed" and "plain" in layouts and not t.has_packed_layout(type_id, isa):
                            continue  # would time the plain layout twice
                        packed = layout == "packed"
                        row_split = split == "2d"
                        label = layout if row_split else f"{layout}/1d"
                        probe = t.time_matmul(type_id, raw, n_in, n_out, x, threads, isa, 1, packed,
                                              split_rows=row_split)[0]
                        repeats = max(3, min(2000, int(args.min_seconds / max(probe, 1e-7))))
                        times = t.time_matmul(type_id, raw, n_in, n_out, x, threads, isa, repeats, packed,
                                              split_rows=row_split)
                        secs, median = min(times), statistics.median(times)
                        gflops = 2.0 * n_in * n_out * rows / secs / 1e9
                        gbps = w_bytes / secs / 1e9
                        line = (f"{name:6} {isa:10} {label:9} {shape:>10} {rows:>5} {threads:>3} {secs * 1e3:9.3f} "
                                f"({median * 1e3:8.3f}) {gflops:8.1f} {gbps:8.1f}")
                        if not args.peer:
                            print(line, flush=True)
                        lines.append((line, secs))
                        cases.append({"type": name, "n_in": n_in, "n_out": n_out, "rows": rows, "threads": threads})
        if args.peer and cases:
            for (line, secs), peer in zip(lines, run_peer(args.peer, cases, args.min_seconds)):
                print(f"{line} {peer['seconds'] * 1e3:9.3f} ({peer['median'] * 1e3:8.3f}) "
                      f"{peer['seconds'] / secs:9.2f}x", flush=True)


if __name__ == "__main__":
    main()
