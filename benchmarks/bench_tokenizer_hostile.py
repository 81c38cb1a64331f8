"""Tokenizer throughput on hostile text, next to English prose.

For each real model's vocabulary (byte-level BPE: smollm2-135m; SentencePiece:
gemma3-270m) and each size (10 kB, 100 kB, 1 MB of characters), prints the
encode time and throughput of prose, digit runs, whitespace runs, random
ASCII and random Unicode, and each one's time relative to prose. CPU time of
this process (time.process_time), best of N rounds, each round timing every
text of a size in turn (so prose and the others meet the same load): robust
on a shared machine.

Usage:
    python benchmarks/bench_tokenizer_hostile.py [--repeat N] [--sizes 10000,100000,1000000] [KEY_OR_PATH ...]
"""

from __future__ import annotations

import argparse
import os
import random
import time

import muser


def english_prose(length: int) -> str:
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k] for k in sorted(topics))
    return (text * (length // len(text) + 1))[:length]


def texts(length: int) -> dict[str, str]:
    rng = random.Random(17)
    printable = [chr(c) for c in range(32, 127)]
    return {
        "prose": english_prose(length),
        "digits": "7" * length,
        "whitespace": " " * length,
        "random ASCII": "".join(rng.choice(printable) for _ in range(length)),
        "random Unicode": "".join(
            chr(rng.choice((rng.randrange(0x20, 0xD800), rng.randrange(0xE000, 0x110000)))) for _ in range(length)),
    }


def best_cpu_seconds_by_kind(repeat: int, engine, by_kind: dict[str, str]) -> dict[str, float]:
    """Best CPU time of each text over `repeat` rounds, the texts taken in turn within a round:
    every text meets the same machine load as prose, so the ratios hold on a shared machine."""
    best = {kind: float("inf") for kind in by_kind}
    for _ in range(repeat):
        for kind, text in by_kind.items():
            started = time.process_time()
            engine.tokenize(text)
            best[kind] = min(best[kind], time.process_time() - started)
    return best


def resolve(arg: str) -> str:
    return arg if os.path.exists(arg) else str(muser.models.path(arg))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"one thread, CPU time, best of {args.repeat} alternating rounds; ratio = time / prose time at the same size")
    print("| model | text | " + " | ".join(f"{n // 1000} k chars: ms (MB/s, x prose)" for n in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for model in args.models:
        engine = muser.Engine(resolve(model), backend="null", threads=1)
        by_size = {n: texts(n) for n in sizes}
        seconds = {n: best_cpu_seconds_by_kind(args.repeat, engine, by_size[n]) for n in sizes}
        for kind in by_size[sizes[0]]:
            cells = []
            for n in sizes:
                took = max(seconds[n][kind], 1e-6)
                mb = len(by_size[n][kind].encode("utf-8", "surrogatepass")) / 1e6
                cells.append(f"{took * 1e3:.1f} ({mb / took:.1f}, {took / max(seconds[n]['prose'], 1e-6):.1f}x)")
            print(f"| {model} | {kind} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
