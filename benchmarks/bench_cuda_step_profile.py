"""Where a CUDA decode step's time goes: wall time per step beside the GPU time of
each kernel, read with PyTorch's profiler (CUPTI sees every kernel in the process,
muser's graph-launched ones too). Needs PyTorch, which the GPU machine's image has.

    python benchmarks/bench_cuda_step_profile.py MODEL.gguf [--rows 1,4] [--steps 24] [--prefill 512]

Per row count it prints: wall ms per step, GPU kernel ms per step (the sum of
kernel durations; the rest of the wall time is the host: launches, the logits
copy, Python), then the kernels by GPU time per step with their count per step.
With --prefill N (0: none) it then does the same for one N-token prefill.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

import muser


def decode_steps(engine, sessions, tokens) -> float:
    start = time.perf_counter()
    for tok in tokens:
        engine.decode_group(sessions, [tok] * len(sessions))
    return (time.perf_counter() - start) / len(tokens)


def kernel_time_us(event) -> float:
    for name in ("self_device_time_total", "self_cuda_time_total", "device_time_total", "cuda_time_total"):
        if hasattr(event, name):
            return float(getattr(event, name))
    raise AttributeError("profiler event without a device time")


def print_kernels(title: str, prof, n: int, wall_s: float, top: int) -> None:
    """The profiled kernels ranked by GPU time, per step of n steps that took wall_s each unprofiled."""
    kernels = [e for e in prof.key_averages() if kernel_time_us(e) > 0]
    kernels.sort(key=kernel_time_us, reverse=True)
    gpu_ms = sum(kernel_time_us(e) for e in kernels) / n / 1000
    print(f"\n{title}: wall {wall_s * 1000:.3f} ms/step (unprofiled), GPU kernels {gpu_ms:.3f} ms/step "
          f"({100 * gpu_ms / (wall_s * 1000):.0f}% of wall)")
    print(f"{'us/step':>9s} {'count/step':>10s} {'us each':>8s}  kernel")
    for e in kernels[:top]:
        per_step = kernel_time_us(e) / n
        count = e.count / n
        print(f"{per_step:9.1f} {count:10.1f} {per_step / max(count, 1e-9):8.2f}  {e.key[:110]}")


def profile_prefill(engine, tokens: int, top: int) -> None:
    prompt = [int(t) for t in np.random.default_rng(3).integers(300, engine.n_vocab, tokens)]
    engine.session(max_context=tokens + 8).prefill(prompt)  # warm-up
    session = engine.session(max_context=tokens + 8)
    start = time.perf_counter()
    session.prefill(prompt)
    wall = time.perf_counter() - start
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        engine.session(max_context=tokens + 8).prefill(prompt)
    print_kernels(f"prefill {tokens} ({tokens / wall:.0f} tok/s)", prof, 1, wall, top)


def profile_rows(engine, rows: int, steps: int, top: int) -> None:
    prompt = [int(t) for t in np.random.default_rng(1).integers(300, engine.n_vocab, 128)]
    sessions = [engine.session(max_context=len(prompt) + 2 * steps + 8) for _ in range(rows)]
    for s in sessions:
        s.prefill(prompt)
    tokens = [int(t) for t in np.random.default_rng(rows).integers(300, engine.n_vocab, 2 * steps)]
    decode_steps(engine, sessions, tokens[:2])  # captures this row count's graph
    wall = decode_steps(engine, sessions, tokens[2:steps])
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        decode_steps(engine, sessions, tokens[steps:])
    print_kernels(f"{rows} row(s)", prof, len(tokens[steps:]), wall, top)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--rows", default="1,4")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--prefill", type=int, default=512, help="tokens of the profiled prefill (0: none)")
    args = ap.parse_args()
    torch.cuda.init()
    engine = muser.Engine(args.model, backend="cuda")
    print(f"{args.model}: backend {engine.backend}")
    for rows in (int(r) for r in args.rows.split(",")):
        profile_rows(engine, rows, args.steps, args.top)
    if args.prefill:
        profile_prefill(engine, args.prefill, args.top)


if __name__ == "__main__":
    main()
