"""Throughput of muser on Ray Serve with 1 vs N replicas, and prefix reuse across replicas.

    python benchmarks/bench_ray_replicas.py [--replicas 1 2] [--threads 1] [--requests 16] [--max-tokens 32]

For each replica count: a local Ray cluster, a muser deployment (smollm2-135m,
`--threads` compute threads per replica), then `--requests` concurrent greedy
generations of `--max-tokens` tokens with distinct prompts (warm-up round
first). Then a round of requests sharing a long prompt prefix, to show the
prefix-affinity router's effect: prompt tokens reused from cache across
replicas. Prints a table.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import ray
from ray import serve

import muser
import muser.ray

SHARED = ("Context: the lighthouse at Point Rowe was built in 1871, automated in 1962 and is now a museum "
          "open from 9 to 17 except on Mondays. ") * 3


def run_round(client, prompts, max_tokens):
    started = time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as pool:
        list(pool.map(lambda p: client.generate(p, max_tokens=max_tokens, temperature=0), prompts))
    return time.perf_counter() - started


def measure(model: str, replicas: int, threads: int, requests: int, max_tokens: int, rounds: int):
    app_name = f"bench-{replicas}"
    app = muser.ray.deployment(model, num_replicas=replicas, threads=threads, slots=4,
                               max_waiting=max(4, requests), max_queued_requests=requests, app_name=app_name)
    handle = serve.run(app, name=app_name, route_prefix=None)
    client = muser.ray.Client(handle)
    prompts = [f"Request {i}: write a short note about the number {i * 7}." for i in range(requests)]
    run_round(client, prompts, 4)  # warm-up: every replica has served
    times = [run_round(client, prompts, max_tokens) for _ in range(rounds)]
    best = min(times)
    shared = [SHARED + f"Question {i}: what happened in {1871 + i * 10}?" for i in range(requests)]
    before = muser.ray.reused_prefix_tokens(app_name)
    for prompt in shared:  # one after another: the router sees each replica's recent prompts
        client.generate(prompt, max_tokens=4, temperature=0)
    time.sleep(1.0)
    reused = muser.ray.reused_prefix_tokens(app_name) - before
    serve.delete(app_name)
    return best, requests * max_tokens / best, reused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    model = str(muser.models.fetch(args.model)) if not args.model.endswith(".gguf") else args.model
    shared_tokens = len(muser.Engine(model, threads=1).tokenize(SHARED))
    ray.init(num_cpus=max(args.replicas) * args.threads, include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    rows = []
    for replicas in args.replicas:
        best, tok_s, reused = measure(model, replicas, args.threads, args.requests, args.max_tokens, args.rounds)
        rows.append((replicas, best, tok_s, reused, shared_tokens))
    serve.shutdown()
    ray.shutdown()

    print(f"\n{args.requests} concurrent greedy requests x {args.max_tokens} tokens, {args.threads} thread(s) "
          f"per replica, best of {args.rounds}:")
    print("| replicas | wall s | generated tok/s | vs 1 replica | shared-prefix round: prompt tokens reused |")
    print("|---|---|---|---|---|")
    base = rows[0][2]
    for replicas, best, tok_s, reused, shared_tokens in rows:
        print(f"| {replicas} | {best:.2f} | {tok_s:.1f} | {tok_s / base:.2f}x | {reused} "
              f"(of {(args.requests - 1) * shared_tokens} possible) |")


if __name__ == "__main__":
    main()
