"""Tokenizer throughput and load time on the real models' vocabularies.

Prints, per model: tokenizer construction time from an opened GGUF file,
encode throughput (MB/s of UTF-8 input) on English prose on one thread, and
decode throughput. Throughput is given for CPU time of this process
(time.process_time, robust on a shared machine) and for wall time. The prose is CPython's own documentation text
(pydoc_data.topics, ~0.8 MB of English with some code), so the numbers are
reproducible anywhere without downloads.

Usage:
    python benchmarks/bench_tokenizer.py [--repeat N] [PATH_OR_KEY ...]

Without arguments it benchmarks smollm2-135m and gemma3-270m through
muser.models.path(key) (run `python -m muser fetch` first), or the paths given.
"""

from __future__ import annotations

import argparse
import os
import time

from muser import _core


def english_prose() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def resolve(arg: str) -> str:
    if os.path.exists(arg):
        return arg
    from muser import models  # the registry of real models

    return str(models.path(arg))


def best_of(repeat: int, fn) -> tuple[float, float]:
    """Best (cpu seconds, wall seconds) over `repeat` runs."""
    best_cpu = best_wall = float("inf")
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - w0)
    return best_cpu, best_wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is reported")
    args = parser.parse_args()

    text = english_prose()
    mb = len(text.encode("utf-8")) / 1e6
    print(f"input: {mb:.2f} MB of English prose (pydoc_data.topics), one thread, best of {args.repeat}")
    print(
        f"{'model':<34} {'n_vocab':>8} {'load s cpu/wall':>16} {'encode MB/s cpu/wall':>21} {'tokens':>8}"
        f" {'decode MB/s cpu':>16}"
    )
    for arg in args.models:
        path = resolve(arg)
        gguf = _core.GgufFile.open(path)
        load = best_of(args.repeat, lambda: _core.Tokenizer(gguf))
        tok = _core.Tokenizer(gguf)
        ids: list[int] = []

        def run_encode() -> None:
            ids[:] = tok.encode(text, add_special=False)

        enc = best_of(args.repeat, run_encode)
        dec = best_of(args.repeat, lambda: tok.decode_bytes(ids))
        name = os.path.basename(path)[:34]
        print(
            f"{name:<34} {tok.n_vocab:>8} {load[0]:>7.3f}/{load[1]:<8.3f} {mb / enc[0]:>10.2f}/{mb / enc[1]:<10.2f}"
            f" {len(ids):>8} {mb / dec[0]:>16.1f}"
        )


if __name__ == "__main__":
    main()
