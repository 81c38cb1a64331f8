"""Throughput of muser's CPU matmul per weight type, instruction set, shape,
batch size and thread count. Prints a table (GFLOP/s and GB/s of weight).

    python benchmarks/bench_kernels.py                     # default sweep
    python benchmarks/bench_kernels.py --types Q4_1,Q8_0 --rows 1,4 --threads 1

Timing is in C++ (one thread pool per configuration, one warm-up call), so
Python overhead is not included. On a shared machine prefer the best-of-N
column; the median shows how much other load disturbed the run.

Weights are random valid blocks (fp16 scales set to sane values). Small
shapes stay in cache across repeats, so they measure compute; the
576x49152 shape (the smollm2 output projection) streams from memory.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from muser._core import _testing as t

# ggml type id, elements per block, bytes per block (ggml's on-disk formats).
TYPES = {
    "F32": (0, 1, 4), "F16": (1, 1, 2), "BF16": (30, 1, 2),
    "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24),
    "Q8_0": (8, 32, 34), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110), "Q4_K": (12, 256, 144),
    "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210),
}

# (n_in, n_out): smollm2's projections and output layer; K-quants need a
# multiple of 256 inputs, so they also get gemma3-like 2048x640 / 1024x2048.
SHAPES = [(576, 576), (576, 1536), (1536, 576), (576, 49152), (2048, 640), (1024, 2048)]
DEFAULT_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                 "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
SCALE_OFFSETS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
}


def random_weight(name: str, n_in: int, n_out: int, rng: np.random.Generator) -> np.ndarray:
    _, elems, nbytes = TYPES[name]
    n = n_in * n_out
    if name == "F32":
        return rng.standard_normal(n).astype(np.float32).view(np.uint8)
    if name == "F16":
        return rng.standard_normal(n).astype(np.float16).view(np.uint8)
    if name == "BF16":
        return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    blocks = rng.integers(0, 256, size=(n // elems, nbytes), dtype=np.uint8)
    for off in SCALE_OFFSETS[name]:
        blocks[:, off:off + 2] = rng.uniform(-0.05, 0.05, (len(blocks), 1)).astype(np.float16).view(np.uint8)
    return blocks.reshape(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", default=",".join(DEFAULT_TYPES))
    parser.add_argument("--isas", default="best", help="comma list of scalar/avx2/avx512/best, or 'all'")
    parser.add_argument("--rows", default="1,4,128")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--shapes", default=",".join(f"{a}x{b}" for a, b in SHAPES))
    parser.add_argument("--min-seconds", type=float, default=0.2, help="time budget per measurement")
    args = parser.parse_args()

    isas = t.cpu_isas() if args.isas == "all" else [s if s != "best" else t.best_isa() for s in args.isas.split(",")]
    rng = np.random.default_rng(0)
    print(f"CPU kernel sets available: {t.cpu_isas()}; best = {t.best_isa()}")
    print("ms = best of N calls (median in brackets); GFLOP/s and GB/s of weight from the best.")
    print(f"{'type':6} {'isa':10} {'in x out':>10} {'rows':>5} {'thr':>3} {'ms':>9} {'(median)':>10} {'GFLOP/s':>8} {'GB/s(w)':>8}")
    for name in args.types.split(","):
        type_id, elems, nbytes = TYPES[name]
        for shape in args.shapes.split(","):
            n_in, n_out = (int(v) for v in shape.split("x"))
            if n_in % elems:
                print(f"{name:6} {'-':10} {shape:>10}  skipped: input size not a multiple of {elems}")
                continue
            raw = random_weight(name, n_in, n_out, rng)
            w_bytes = n_in * n_out // elems * nbytes
            for isa in isas:
                for rows in (int(r) for r in args.rows.split(",")):
                    x = rng.standard_normal((rows, n_in)).astype(np.float32)
                    for threads in (int(v) for v in args.threads.split(",")):
                        probe = t.time_matmul(type_id, raw, n_in, n_out, x, threads, isa, 1)[0]
                        repeats = max(3, min(2000, int(args.min_seconds / max(probe, 1e-7))))
                        times = t.time_matmul(type_id, raw, n_in, n_out, x, threads, isa, repeats)
                        secs, median = min(times), statistics.median(times)
                        gflops = 2.0 * n_in * n_out * rows / secs / 1e9
                        gbps = w_bytes / secs / 1e9
                        print(f"{name:6} {isa:10} {shape:>10} {rows:>5} {threads:>3} {secs * 1e3:9.3f} "
                              f"({median * 1e3:8.3f}) {gflops:8.1f} {gbps:8.1f}", flush=True)


if __name__ == "__main__":
    main()
