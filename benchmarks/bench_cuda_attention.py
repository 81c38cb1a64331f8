"""The CUDA decode attention alone: microseconds per layer (one launch: the split
blocks, the last of each row and head folding the partials) at llama3-8b and smollm2-135m head layouts, 1 and 4 rows,
at several context lengths, with the layer's KV evicted from L2 before each
launch (as a decode step's weights evict it between layers). Also the
fraction of 4.3 TB/s the K/V reads reach.

Then a 512-row prefill segment (llama3-8b layout, positions 0..511 and a
continuation at 1536..2047): microseconds per layer of the decode kernel and
of the prefill kernel (its default block and 4, 8, 16 warps per block); both
give every row the same bits (tests/cuda/test_cuda_prefill_attention.py).

    python benchmarks/bench_cuda_attention.py [--contexts 140,1024,4096] [--reps 20] [--prefill-only]
"""

from __future__ import annotations

import argparse

import numpy as np

from muser._core import _testing as t

PEAK_BYTES_PER_S = 4.3e12
LAYOUTS = {"llama3-8b": (32, 8, 128), "smollm2-135m": (9, 3, 64)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", default="140,1024,4096")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--prefill-only", action="store_true")
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    rng = np.random.default_rng(0)
    if not args.prefill_only:
        decode_table(contexts, args.reps, rng)
    prefill_table(args.reps, rng)


def prefill_table(reps: int, rng: np.random.Generator) -> None:
    n_head, n_head_kv, hd = LAYOUTS["llama3-8b"]
    k = rng.standard_normal((2048, n_head_kv * hd)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((2048, n_head_kv * hd)).astype(np.float16).view(np.uint16)
    q = (rng.standard_normal((512, n_head * hd)) / np.sqrt(hd)).astype(np.float32)
    print(f"\n{'prefill 512 rows, llama3-8b':32s} {'kernel':>14s} {'us/layer':>9s} {'x 32 layers ms':>15s}")
    for start in (0, 1536):
        positions = list(range(start, start + 512))
        variants = [("decode", 0), ("prefill", 0), ("prefill", 4), ("prefill", 8), ("prefill", 16)]
        for kernel, warps in variants:
            us = t.cuda_time_attention(k, v, q, positions, n_head, n_head_kv, reps, kernel, warps)
            label = kernel if kernel == "decode" or warps == 0 else f"prefill/{warps}w"
            print(f"{'positions ' + str(start) + '..' + str(start + 511):32s} {label:>14s} {us:9.1f} "
                  f"{us * 32 / 1000:15.2f}", flush=True)


def decode_table(contexts: list[int], reps: int, rng: np.random.Generator) -> None:
    print(f"{'layout':14s} {'rows':>4s} {'context':>7s} {'us/layer':>9s} {'KV GB/s':>8s} {'of peak':>7s}")
    for name, (n_head, n_head_kv, hd) in LAYOUTS.items():
        plane_rows = max(contexts)
        k = rng.standard_normal((plane_rows, n_head_kv * hd)).astype(np.float16).view(np.uint16)
        v = rng.standard_normal((plane_rows, n_head_kv * hd)).astype(np.float16).view(np.uint16)
        for rows in (1, 4):
            for ctx in contexts:
                positions = [ctx - 1 - r for r in range(rows)]  # separate sessions at about ctx
                q = (rng.standard_normal((rows, n_head * hd)) / np.sqrt(hd)).astype(np.float32)
                us = t.cuda_time_attention(k, v, q, positions, n_head, n_head_kv, reps)
                # The rows share one layer's planes here: DRAM reads the longest row's span once.
                kv_bytes = (max(positions) + 1) * n_head_kv * hd * 2 * 2
                rate = kv_bytes / (us * 1e-6)
                print(f"{name:14s} {rows:4d} {ctx:7d} {us:9.2f} {rate / 1e9:8.0f} {rate / PEAK_BYTES_PER_S:7.0%}",
                      flush=True)


if __name__ == "__main__":
    main()
