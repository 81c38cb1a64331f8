"""CPU speed of one GGUF model at several thread counts, with the memory
bandwidth each decode cell reaches.

    python benchmarks/bench_thread_scaling.py MODEL.gguf [--threads 1,2,4,8,16]
        [--prompt 512] [--steps 64] [--group-steps 32] [--reps 1] [--oversubscribe]

Per thread count (one Engine each, CPU backend): prefill tokens/s for a
--prompt-token prompt; single-row decode tokens/s over --steps steps right
after that prompt (feeding prompt tokens, so no sampling in the loop); and the
aggregate tokens/s of 4-row decode groups (four sessions after 64-token
prompts, --group-steps steps). The same workload as the device scripts'
mb.py, so the figures compare with its rows.

"weights/step" is what one decode step reads of the model: every tensor of
the file except the token embedding table when the model has its own output
table (a step looks up only its tokens' rows there; a tied table is read
whole as the output projection). Bandwidth = weights/step x steps/s (a
4-row step reads the weights once for its four tokens); KV-cache and
activation traffic come on top and are not counted.

Needs only numpy and muser. Thread counts above this machine's CPU count are
skipped unless --oversubscribe.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# numpy's BLAS threads would compete with the compute threads being measured.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import muser  # noqa: E402
from muser import _core  # noqa: E402

GROUP_ROWS = 4
GROUP_PROMPT = 64


def weight_bytes_per_step(path: str) -> tuple[int, int]:
    """(bytes a decode step reads of the weights, bytes of the whole file's tensors)."""
    infos = _core.GgufFile.open(path).tensor_infos()
    names = {name for name, *_ in infos}
    total = sum(n_bytes for *_, n_bytes in infos)
    step = 0
    for name, _type_id, shape, _offset, n_bytes in infos:
        if name == "token_embd.weight" and "output.weight" in names:
            rows = shape[1] if len(shape) > 1 else 1
            step += n_bytes // max(rows, 1)  # the looked-up row
            continue
        step += n_bytes
    return step, total


def measure(path: str, threads: int, prompt_len: int, steps: int, group_steps: int) -> dict[str, float]:
    engine = muser.Engine(path, threads=threads, backend="cpu")
    # Random ordinary tokens (past the special ones at the start of most vocabularies).
    rng = np.random.default_rng(1)
    low = min(300, engine.n_vocab // 2)
    n_tokens = max(prompt_len + steps + 1, GROUP_PROMPT + group_steps)
    prompt = [int(x) for x in rng.integers(low, engine.n_vocab, n_tokens)]

    session = engine.session(max_context=prompt_len + steps + 8)
    started = time.perf_counter()
    session.prefill(prompt[:prompt_len])
    prefill = prompt_len / (time.perf_counter() - started)

    session.decode(prompt[prompt_len])  # warm-up step
    started = time.perf_counter()
    for token in prompt[prompt_len + 1 : prompt_len + 1 + steps]:
        session.decode(token)
    decode = steps / (time.perf_counter() - started)

    rows = [engine.session(max_context=GROUP_PROMPT + group_steps + 8) for _ in range(GROUP_ROWS)]
    for row in rows:
        row.prefill(prompt[:GROUP_PROMPT])
    feed = prompt[GROUP_PROMPT : GROUP_PROMPT + group_steps]
    started = time.perf_counter()
    for token in feed:
        engine.decode_group(rows, [token] * GROUP_ROWS)
    group = GROUP_ROWS * len(feed) / (time.perf_counter() - started)
    return {"prefill": prefill, "decode": decode, "group": group}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="path of a GGUF file")
    parser.add_argument("--threads", default="1,2,4,8,16", help="comma-separated thread counts")
    parser.add_argument("--prompt", type=int, default=512, help="prefill length (default 512)")
    parser.add_argument("--steps", type=int, default=64, help="single-row decode steps (default 64)")
    parser.add_argument("--group-steps", type=int, default=32, help="4-row decode group steps (default 32)")
    parser.add_argument("--reps", type=int, default=1, help="rounds per thread count; the best is kept")
    parser.add_argument("--oversubscribe", action="store_true", help="also run counts above the CPU count")
    args = parser.parse_args(argv)

    try:
        counts = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        parser.error(f"--threads must be comma-separated integers, got {args.threads!r}")
    if not counts or min(counts) < 1:
        parser.error("--threads needs at least one count, each >= 1")
    if args.prompt < 1 or args.steps < 1 or args.group_steps < 1 or args.reps < 1:
        parser.error("--prompt, --steps, --group-steps and --reps must be >= 1")
    if not os.path.isfile(args.model):
        parser.error(f"no such file: {args.model}")

    step_bytes, file_bytes = weight_bytes_per_step(args.model)
    cpus = os.cpu_count() or 1
    print(f"{os.path.basename(args.model)}: weights/step {step_bytes / 1e6:.1f} MB "
          f"(tensors in the file {file_bytes / 1e6:.1f} MB); CPU count {cpus}; "
          f"prefill {args.prompt}, decode after it, {GROUP_ROWS} rows after {GROUP_PROMPT}-token prompts")
    header = (f"{'threads':>7} | {'prefill tok/s':>13} | {'decode tok/s':>12} | {'decode GB/s':>11} | "
              f"{GROUP_ROWS}-row tok/s | {GROUP_ROWS}-row GB/s")
    print(header)
    print("-" * len(header))
    for threads in counts:
        if threads > cpus and not args.oversubscribe:
            print(f"{threads:>7} | skipped: more threads than CPUs ({cpus}); --oversubscribe runs it")
            continue
        best: dict[str, float] = {}
        for _ in range(args.reps):
            cell = measure(args.model, threads, args.prompt, args.steps, args.group_steps)
            best = {k: max(v, best.get(k, 0.0)) for k, v in cell.items()}
        decode_gbs = step_bytes * best["decode"] / 1e9
        group_gbs = step_bytes * best["group"] / GROUP_ROWS / 1e9
        print(f"{threads:>7} | {best['prefill']:>13.1f} | {best['decode']:>12.1f} | {decode_gbs:>11.1f} | "
              f"{best['group']:>10.1f} | {group_gbs:>10.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
