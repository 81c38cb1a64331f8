"""The CUDA decode matvec alone, per llama3-8b shape: microseconds per launch
and the weight bandwidth it reaches (of the H200's 4.3 TB/s), at 1, 2 and 4
rows, for the config matvec picks ("auto") and each forced decode config
(warp_rows x unroll, "n" = without the wide loads of Q4_0 / Q4_K, "s8" =
a warp's lanes spread over 8 weight rows; 1x1n is the kernel before the
decode configs existed). Launches cycle through copies of the
weights, so each reads them from device memory, not L2. Run on the GPU
machine:

    python benchmarks/bench_cuda_matvec.py [--types Q4_0,Q4_K] [--reps 50] [--rows 1,2,4]

Then, per type and row count, the matvec time of one llama3-8b decode step
(32 layers of q, k, v, o, gate, up, down, plus the output matrix) under
each config, and under the best config per shape.
"""

from __future__ import annotations

import argparse

import numpy as np
from gguf import GGMLQuantizationType as GT
from gguf.constants import GGML_QUANT_SIZES

from muser._core import _testing as t

PEAK_BYTES_PER_S = 4.3e12
# (label, k, n_out, launches per llama3-8b step)
SHAPES = [("q/o", 4096, 4096, 64), ("k/v", 4096, 1024, 64), ("gate/up", 4096, 14336, 64),
          ("down", 14336, 4096, 32), ("output", 4096, 128256, 1)]
# (label, warp_rows, unroll, wide, lane_rows); warp_rows 0 = matvec's own pick; "s8" = lane_rows 8 (a warp's
# lanes spread over 8 weight rows, ops_matvec_spread.cu).
CONFIGS = [("auto", 0, 0, True, 1), ("1x1n", 1, 1, False, 1), ("1x1", 1, 1, True, 1), ("2x1", 2, 1, True, 1),
           ("2x2", 2, 2, True, 1), ("4x1", 4, 1, True, 1), ("4x2", 4, 2, True, 1), ("s8x1", 1, 1, True, 8),
           ("s8x2", 1, 2, True, 8)]
NARROW = [("2x2n", 2, 2, False, 1)]  # Q4_0 only: wide loads off
# Offsets of the fp16 fields each block scales its quants by.
SCALES = {GT.Q4_0: [0], GT.Q8_0: [0], GT.Q4_K: [0, 2], GT.Q6_K: [208], GT.Q4_1: [0, 2], GT.Q5_0: [0]}


def random_weights(qtype: GT, k: int, n_out: int, rng: np.random.Generator) -> np.ndarray:
    """Random quant bytes with small finite scales (speed only; values do not matter)."""
    elems, nbytes = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_out * k // elems, nbytes), dtype=np.uint8)
    for off in SCALES[qtype]:
        blocks[:, off:off + 2] = np.frombuffer(np.float16(0.001).tobytes(), dtype=np.uint8)
    return blocks.reshape(-1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default="Q4_0,Q4_K")
    ap.add_argument("--rows", default="1,2,4")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    row_counts = [int(r) for r in args.rows.split(",")]
    print(f"{'type':5s} {'shape':8s} {'k':>6s} {'n_out':>7s} {'rows':>4s} {'config':>6s} {'us':>8s} "
          f"{'GB/s':>7s} {'of peak':>7s}")
    for name in args.types.split(","):
        qtype = GT[name]
        configs = CONFIGS + (NARROW if qtype == GT.Q4_0 else [])
        # step[rows][config] = us of one step's matvecs; best[rows] = the best config per shape
        step = {rows: {c[0]: 0.0 for c in configs} for rows in row_counts}
        best = {rows: 0.0 for rows in row_counts}
        for label, k, n_out, per_step in SHAPES:
            w = random_weights(qtype, k, n_out, rng)
            for rows in row_counts:
                x = rng.standard_normal((rows, k)).astype(np.float32)
                times = {}
                for cname, warp_rows, unroll, wide, lane_rows in configs:
                    sec = t.cuda_time_matvec(int(qtype), w, n_out, x, args.reps, warp_rows, unroll, wide, lane_rows)
                    times[cname] = sec
                    rate = w.nbytes / sec
                    print(f"{name:5s} {label:8s} {k:6d} {n_out:7d} {rows:4d} {cname:>6s} {sec * 1e6:8.1f} "
                          f"{rate / 1e9:7.0f} {100 * rate / PEAK_BYTES_PER_S:6.0f}%", flush=True)
                    step[rows][cname] += sec * 1e6 * per_step
                best[rows] += min(times.values()) * 1e6 * per_step
        for rows in row_counts:
            cells = "  ".join(f"{c} {us / 1000:.2f}" for c, us in step[rows].items())
            print(f"{name} llama3-8b step matvec ms, {rows} row(s): {cells}  best-per-shape {best[rows] / 1000:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
