"""Time one sampling step (chain.sample) for common settings on real vocab sizes.

Uses llama.cpp's last-position logits of the two reference models
(tests/fixtures/reference/logits/*.npy: 49,152 and 262,144 entries) so the
distributions are realistic. Prints, per step, the fastest and the median of
``--steps`` timed calls, in ms (the fastest is the least disturbed by other
load on the machine).

Run: python benchmarks/bench_sampling.py [--steps 50]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from muser.sampling import SamplingParams, make_sampler

LOGITS_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "reference" / "logits"

CONFIGS = {
    "default chain (top-k 40)": SamplingParams(),
    "greedy (temperature 0)": SamplingParams(temperature=0.0),
    "top-p 0.95 + min-p, no top-k": SamplingParams(top_k=0),
    "full-vocab draw (no truncation)": SamplingParams(top_k=0, top_p=1.0, min_p=0.0),
    "typical 0.9, no top-k": SamplingParams(top_k=0, typical_p=0.9, top_p=1.0, min_p=0.0),
    "xtc always, no top-k": SamplingParams(top_k=0, xtc_probability=1.0, xtc_threshold=0.1),
    "top-n-sigma 1.0, no top-k": SamplingParams(top_k=0, top_n_sigma=1.0),
    "dynamic temperature, no top-k": SamplingParams(top_k=0, dynatemp_range=0.5),
    "penalties (64, all three)": SamplingParams(repeat_penalty=1.1, frequency_penalty=0.1, presence_penalty=0.1),
    "DRY over 1024 tokens": SamplingParams(dry_multiplier=0.8, dry_sequence_breakers=()),
    "mirostat v1": SamplingParams(mirostat=1),
    "mirostat v2": SamplingParams(mirostat=2),
}


def load_logits(n_vocab: int, prefix: str) -> np.ndarray:
    path = LOGITS_DIR / f"{prefix}__plain__last.npy"
    if path.exists():
        return np.load(path).astype(np.float32)
    return (np.random.default_rng(0).standard_normal(n_vocab) * 3).astype(np.float32)


def time_step(params: SamplingParams, logits: np.ndarray, steps: int) -> tuple[float, float]:
    chain = make_sampler(params, seed=1)
    history = np.random.default_rng(1).integers(0, logits.shape[0], size=1024)
    chain.accept_prompt(int(t) for t in history)
    chain.sample(logits)  # warm-up
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        chain.sample(logits)
        times.append(time.perf_counter() - start)
    return min(times) * 1e3, float(np.median(times)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    vocabs = {
        "smollm2 49,152": load_logits(49152, "smollm2-135m-q4_1"),
        "gemma3 262,144": load_logits(262144, "gemma3-270m-q4_k_m"),
    }
    header = f"{'setting (min / median ms)':34s}" + "".join(f"{name:>20s}" for name in vocabs)
    print(header)
    print("-" * len(header))
    for label, params in CONFIGS.items():
        row = f"{label:34s}"
        for logits in vocabs.values():
            fastest, median = time_step(params, logits, args.steps)
            row += f"{fastest:11.2f} /{median:7.2f}"
        print(row)


if __name__ == "__main__":
    main()
