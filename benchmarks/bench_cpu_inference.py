"""CPU inference speed, muser beside llama.cpp, on the real models.

    python benchmarks/bench_cpu_inference.py [--threads 2] [--reps 3] [--models smollm2-135m gemma3-270m]

For each model: prefill tokens/s for a 128- and a 512-token prompt, and
decode tokens/s (64 greedy steps after the 128-token prompt), with the same
thread count on both sides; llama.cpp runs through benchmarks/peer_llama_cpp.py
under the peer interpreter ($MUSER_PEER_PYTHON or ../peer-venv/bin/python).
Each cell is the best of --reps runs; muser's runs are split around the
peer's so both see the same machine load. Also reports muser's resident
memory after loading each model and after running four sessions on it
(weights are mapped once, so the second figure grows only by KV caches and
activations).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import muser  # noqa: E402
import muser.models  # noqa: E402
from benchmarks.peer import default_peer_python, run_peer  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "reference"
REFERENCE_JSON = {"smollm2-135m": "smollm2-135m-q4_1.json", "gemma3-270m": "gemma3-270m-q4_k_m.json"}
PROMPT_LENGTHS = (128, 512)
DECODE_STEPS = 64


def rss_mib() -> float:
    """Resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def prompt_tokens(model_key: str, n: int) -> list[int]:
    """n real tokens: the reference prompts' ids, repeated (BOS first where the model adds one)."""
    reference = json.loads((REFERENCE / REFERENCE_JSON[model_key]).read_text())
    pool = [t for p in reference["prompts"].values() for t in p["tokens_no_special"]]
    head = reference["prompts"]["long"]["tokens"][:1] if reference["vocab_add_bos"] else []
    body = (pool * (n // len(pool) + 1))[: n - len(head)]
    return head + body


def muser_prefill(engine: muser.Engine, tokens: list[int]) -> float:
    session = engine.session(max_context=2048)
    started = time.perf_counter()
    session.prefill(tokens)
    return len(tokens) / (time.perf_counter() - started)


def muser_decode(engine: muser.Engine, prompt: list[int], steps: int) -> float:
    session = engine.session(max_context=2048)
    session.prefill(prompt)
    token = int(np.argmax(session.logits))
    started = time.perf_counter()
    for _ in range(steps):
        session.decode(token)
        token = int(np.argmax(session.logits))
    return steps / (time.perf_counter() - started)


def muser_rates(engine: muser.Engine, prompts: dict[int, list[int]], reps: int) -> dict[str, float]:
    rates = {f"prefill {n}": max(muser_prefill(engine, prompts[n]) for _ in range(reps)) for n in PROMPT_LENGTHS}
    rates["decode"] = max(muser_decode(engine, prompts[128], DECODE_STEPS) for _ in range(max(1, reps - 1)))
    return rates


def peer_rates(peer_python: str, path: Path, prompts: dict[int, list[int]], threads: int, reps: int) -> dict[str, float]:
    tasks = [{"kind": "prefill", "tokens": prompts[n], "reps": reps} for n in PROMPT_LENGTHS]
    tasks.append({"kind": "decode", "prompt": prompts[128], "n_steps": DECODE_STEPS, "reps": max(1, reps - 1)})
    results = run_peer(peer_python, str(path), tasks, threads=threads, n_ctx=2048)
    names = [f"prefill {n}" for n in PROMPT_LENGTHS] + ["decode"]
    return {name: r["tokens_per_s"] for name, r in zip(names, results)}


def four_session_run(engine: muser.Engine, prompt: list[int]) -> int:
    """Four resident sessions, each prefilled and decoded a little; returns their KV bytes."""
    sessions = [engine.session(max_context=2048) for _ in range(4)]
    for i, session in enumerate(sessions):
        session.prefill(prompt[: len(prompt) - i])
        for _ in range(16):
            session.decode(int(np.argmax(session.logits)))
    return sum(s.kv_bytes for s in sessions)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=list(REFERENCE_JSON), choices=list(REFERENCE_JSON))
    parser.add_argument("--no-peer", action="store_true", help="muser only")
    args = parser.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    peer_python = None if args.no_peer else default_peer_python()

    rows, memory = [], []
    for key in args.models:
        path = muser.models.path(key)
        rss_before = rss_mib()
        engine = muser.Engine(path, threads=args.threads)
        rss_loaded = rss_mib()
        prompts = {n: prompt_tokens(key, n) for n in PROMPT_LENGTHS}
        ours = muser_rates(engine, prompts, max(1, args.reps // 2))
        theirs = peer_rates(peer_python, path, prompts, args.threads, args.reps) if peer_python else {}
        again = muser_rates(engine, prompts, max(1, args.reps - args.reps // 2))
        ours = {name: max(rate, again[name]) for name, rate in ours.items()}
        for name, rate in ours.items():
            rows.append((key, name, rate, theirs.get(name)))
        kv_bytes = four_session_run(engine, prompts[512])
        memory.append((key, rss_loaded - rss_before, rss_mib() - rss_before, kv_bytes / 2**20, path.stat().st_size / 2**20))
        del engine

    print(f"\nCPU inference, {args.threads} threads, tokens/s (best of {args.reps}); muser {muser.__version__}")
    print(f"{'model':14s} {'task':12s} {'muser':>9s} {'llama.cpp':>10s} {'ratio':>7s}")
    for key, name, rate, peer in rows:
        peer_cell = f"{peer:10.1f}" if peer else f"{'-':>10s}"
        ratio = f"{rate / peer:7.2f}" if peer else f"{'-':>7s}"
        print(f"{key:14s} {name:12s} {rate:9.1f} {peer_cell} {ratio}")
    print("\nmuser resident memory (MiB, growth of this process):")
    print(f"{'model':14s} {'file':>8s} {'after load':>11s} {'after 4 sessions':>17s} {'KV of the 4':>12s}")
    for key, loaded, after, kv, size in memory:
        print(f"{key:14s} {size:8.1f} {loaded:11.1f} {after:17.1f} {kv:12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
