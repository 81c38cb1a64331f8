"""The prefill matmul alone on the GPU: microseconds per call of the backend's
matvec() on llama3-8b's matrix shapes (Q4_0 and Q8_0: the int8 tensor-core GEMM
from 41 rows, the matvec tiles of 8 rows below; Q4_K: always the tiles), at 512,
64, 16 and 8 rows, with the integer tera-ops per second (2 * rows * n_out * k
per call).

    python benchmarks/bench_cuda_gemm.py [--rows 512,64,16,8] [--reps 20] [--types Q4_0,Q4_K]
        [--shapes q,gate,...] [--no-groups]

Beside each (unless --no-groups), the same rows through the decode kernel in
groups of 4 (one launch per group), which tells where the GEMM starts to pay.
MUSER_CUDA_GEMM=v1 in the environment times another version of the
GEMM than the default (the packed kernel for Q4_0, v1 for the other types;
ops_gemm_mma.cu says which).

The sum over one layer's seven matrices times 32 layers is the model's matmul
time for one prefill chunk of that many rows.
"""

from __future__ import annotations

import argparse

import numpy as np
from gguf import GGMLQuantizationType as GT

from muser._core import _testing as t
from tests.backend.kernel_cases import random_row

# llama3-8b: (name, n_out, k, per layer)
SHAPES = [("q", 4096, 4096), ("k", 1024, 4096), ("v", 1024, 4096), ("o", 4096, 4096),
          ("gate", 14336, 4096), ("up", 14336, 4096), ("down", 4096, 14336)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="512,64,16,8")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--types", default="Q4_0,Q4_K")
    ap.add_argument("--shapes", default=",".join(label for label, _, _ in SHAPES))
    ap.add_argument("--no-groups", action="store_true")
    args = ap.parse_args()
    shapes = [shape for shape in SHAPES if shape[0] in args.shapes.split(",")]
    rng = np.random.default_rng(0)
    print(f"{'type':6s} {'rows':>5s} {'matrix':>16s} {'us':>9s} {'TOPS':>7s} {'groups of 4 us':>15s}")
    for name in args.types.split(","):
        qtype = GT[name]
        for rows in (int(r) for r in args.rows.split(",")):
            layer_us = layer_groups_us = 0.0
            for label, n_out, k in shapes:
                raw = random_row(qtype, n_out * k, rng)
                x = rng.standard_normal((rows, k)).astype(np.float32)
                us = t.cuda_matvec_time_us(int(qtype), raw, n_out, x, reps=args.reps)
                # The same rows as decode groups of 4 (the matvec kernel, what the
                # prefill tiles cost per weight pass): the GEMM's row threshold.
                groups_us = (float("nan") if args.no_groups else
                             t.cuda_matvec_time_us(int(qtype), raw, n_out, x, group_rows=4, reps=2))
                layer_us += us
                layer_groups_us += groups_us
                print(f"{name:6s} {rows:5d} {label + f' {n_out}x{k}':>16s} {us:9.1f} "
                      f"{2 * rows * n_out * k / us / 1e6:7.1f} {groups_us:15.1f}", flush=True)
            if len(shapes) < len(SHAPES):
                continue
            print(f"{name:6s} {rows:5d} {'32 layers':>16s} {32 * layer_us / 1000:8.2f} ms "
                  f"({rows / (32 * layer_us / 1e6):.0f} rows/s of matmuls alone; groups of 4: "
                  f"{32 * layer_groups_us / 1000:.2f} ms)", flush=True)


if __name__ == "__main__":
    main()
