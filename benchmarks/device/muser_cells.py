"""muser's side of issue 11's table, timed the way llama-bench and llama-batched-bench time llama.cpp.

    python benchmarks/device/muser_cells.py MODEL.gguf THREADS [--tg 128] [--reps 2] [--group-steps 32]

Each figure follows its llama.cpp counterpart's protocol, so the two sides of a cell do the same work:
- prefill 512 (llama-bench pp512): one warm-up prefill, then --reps prefills of 512 tokens into fresh sessions;
  the mean of their tokens per second.
- single-row decode (llama-bench tg N): one warm-up token, then --reps runs of --tg tokens decoded one at a
  time from an empty context; the mean of their tokens per second. With --depth D, the same again after D
  prompt tokens (llama-bench's -d D), printed as "tg@D". (The device tool's mb.py decodes after a 512-token prompt while
  llama-bench's tg starts from an empty context, so its cells compared unequal work.)
- 4 rows (llama-batched-bench -npp 64 -ntg N -npl 4): four sessions prefilled with 64 tokens, then
  --group-steps decode_group steps of all four; 4 * steps / seconds.
Prints one line in the format benchmarks/device/format_table.py reads.
"""

import argparse
import time

import numpy as np

import muser


def mean_rate(tokens: int, new_session, run, reps: int) -> float:
    """The mean tokens per second of `reps` timed runs, each on a session made before its clock starts."""
    rates = []
    for _ in range(reps):
        session = new_session()
        start = time.perf_counter()
        run(session)
        rates.append(tokens / (time.perf_counter() - start))
    return sum(rates) / len(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("threads", type=int)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--tg", type=int, default=64, help="tokens per single-row decode run")
    parser.add_argument("--depth", type=int, default=0,
                        help="tokens already in the context when a decode run starts (llama-bench's -d)")
    parser.add_argument("--reps", type=int, default=2, help="timed runs per figure (llama-bench's -r)")
    parser.add_argument("--group-steps", type=int, default=32, help="decode_group steps of the 4-row figure")
    args = parser.parse_args()

    engine = muser.Engine(args.model, threads=args.threads, backend=args.backend)
    prompt = [int(x) for x in np.random.default_rng(1).integers(300, engine.n_vocab, 512 + args.depth + args.tg)]
    context = 1024 + args.depth + args.tg

    def new_session():
        return engine.session(max_context=context)

    def prefill(session) -> None:
        session.prefill(prompt[:512])

    def decode_rate(depth: int) -> float:
        def new_decode_session():
            session = new_session()
            session.prefill(prompt[:depth])
            return session

        def generate(session) -> None:
            for token in prompt[depth:depth + args.tg]:
                session.decode(token)

        mean_rate(1, new_decode_session, lambda session: session.decode(prompt[depth]), 1)  # warm-up
        return mean_rate(args.tg, new_decode_session, generate, args.reps)

    mean_rate(512, new_session, prefill, 1)  # warm-up, like llama-bench's
    pp = mean_rate(512, new_session, prefill, args.reps)
    decode = f"tg {decode_rate(0):7.1f}"
    if args.depth:
        decode += f"  tg@{args.depth} {decode_rate(args.depth):7.1f}"

    rows = [engine.session(max_context=context) for _ in range(4)]
    for row in rows:
        row.prefill(prompt[:64])
    steps = prompt[64:64 + args.group_steps]
    start = time.perf_counter()
    for token in steps:
        engine.decode_group(rows, [token] * 4)
    group = 4 * len(steps) / (time.perf_counter() - start)
    name = args.model.rsplit("/", 1)[-1]
    print(f"muser   {name:28s} t={args.threads:<3d} pp512 {pp:8.1f}  {decode}  4-row {group:7.1f}")


if __name__ == "__main__":
    main()
