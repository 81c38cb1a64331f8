"""CUDA backend speed on the GPU machine, in llama-batched-bench's terms:
128-token prompt per sequence, then 128 decoded tokens with 1, 2 and 4
sequences in one decode group (aggregate tok/s), and prefill of a 512-token
segment. Also the fraction of memory bandwidth each decode cell reaches
(weight bytes read per step / step time / 4.3 TB/s, the H200's measured copy
rate) and the GPU memory of 4 slots at 4,096 context.

    python benchmarks/bench_cuda.py MODEL.gguf [MODEL.gguf ...] [--peer peer.txt] [--prefill-only | --decode-only]

--peer names a file of llama.cpp lines printed by .device/cuda-peer.sh; the
table then shows muser / llama.cpp per cell.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from pathlib import Path

import numpy as np

import muser
from gguf import GGUFReader

PEAK_BYTES_PER_S = 4.3e12


def gpu_memory_used_mib() -> float:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return float(out.split()[0])


def weight_bytes_per_step(path: str) -> int:
    """Bytes of every matrix a decode step reads (the embedding contributes one row)."""
    total = 0
    for t in GGUFReader(path).tensors:
        if t.name == "token_embd.weight":
            continue
        total += int(t.n_bytes)
    return total


def decode_rate(engine, rows: int, prompt: list[int], steps: int = 128) -> float:
    sessions = [engine.session(max_context=len(prompt) + steps + 8) for _ in range(rows)]
    for s in sessions:
        s.prefill(prompt)
    tokens = [int(t) for t in np.random.default_rng(rows).integers(300, engine.n_vocab, steps)]
    engine.decode_group(sessions, [tokens[0]] * rows)  # warm-up: captures this row count's graph
    start = time.perf_counter()
    for tok in tokens[1:]:
        engine.decode_group(sessions, [tok] * rows)
    return rows * (steps - 1) / (time.perf_counter() - start)


def prefill_rate(engine, n_vocab: int, reps: int = 3) -> float:
    prompt = [int(t) for t in np.random.default_rng(7).integers(300, n_vocab, 512)]
    engine.session(max_context=520).prefill(prompt)  # warm-up
    best = 0.0
    for _ in range(reps):
        s = engine.session(max_context=520)
        start = time.perf_counter()
        s.prefill(prompt)
        best = max(best, 512 / (time.perf_counter() - start))
    return best


def peer_figures(path: str | None) -> dict[tuple[str, str], float]:
    figures: dict[tuple[str, str], float] = {}
    if not path or not Path(path).exists():
        return figures
    for line in Path(path).read_text().splitlines():
        m = re.match(r"llama\.cpp CUDA (\S+)\s+pp512\s+([\d.]+)", line)
        if m:
            figures[(m.group(1), "pp512")] = float(m.group(2))
        m = re.match(r"llama\.cpp CUDA (\S+)\s+(\d+) seq decode\s+([\d.]+)", line)
        if m:
            figures[(m.group(1), m.group(2))] = float(m.group(3))
    return figures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--peer", default=None)
    ap.add_argument("--prefill-only", action="store_true", help="only the pp512 cell")
    ap.add_argument("--decode-only", action="store_true", help="only the decode cells (no pp512, no memory)")
    args = ap.parse_args()
    peer = peer_figures(args.peer)
    print(f"{'model':24s} {'cell':>8s} {'muser tok/s':>12s} {'llama.cpp':>10s} {'ratio':>6s} {'bandwidth':>9s}")
    for path in args.models:
        name = Path(path).stem
        before = gpu_memory_used_mib()
        engine = muser.Engine(path, backend="cuda")
        assert engine.backend == "cuda"
        step_bytes = weight_bytes_per_step(path)
        prompt = [int(t) for t in np.random.default_rng(1).integers(300, engine.n_vocab, 128)]
        cells = []
        for rows in () if args.prefill_only else (1, 2, 4):
            rate = decode_rate(engine, rows, prompt)
            bw = (rate / rows) * step_bytes / PEAK_BYTES_PER_S
            cells.append((f"{rows} seq", rate, peer.get((name, str(rows))), f"{100 * bw:.0f}%"))
        if not args.decode_only:
            cells.append(("pp512", prefill_rate(engine, engine.n_vocab), peer.get((name, "pp512")), ""))
        for cell, rate, ref, bw in cells:
            ratio = f"{rate / ref:.2f}" if ref else "-"
            ref_text = f"{ref:.1f}" if ref else "-"
            print(f"{name:24s} {cell:>8s} {rate:12.1f} {ref_text:>10s} {ratio:>6s} {bw:>9s}", flush=True)
        if args.prefill_only or args.decode_only:
            del engine
            continue
        slots = [engine.session(max_context=4096) for _ in range(4)]
        used = gpu_memory_used_mib() - before
        print(f"{name:24s} GPU memory with weights + 4 slots x 4096 context: {used:.0f} MiB "
              f"(weights {step_bytes / 2**20:.0f} MiB read per step)", flush=True)
        del slots, engine


if __name__ == "__main__":
    main()
