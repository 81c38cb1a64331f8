"""Throughput of muser on Ray Serve with 1 vs N replicas, and prefix reuse across replicas.

    python benchmarks/bench_ray_replicas.py [--replicas 1 2] [--threads 1] [--requests 16] [--max-tokens 32]

One local Ray cluster with a muser deployment per replica count (smollm2-135m,
`--threads` compute threads per replica); rounds of `--requests` concurrent
greedy generations of exactly `--max-tokens` tokens (end tokens banned) with
distinct prompts, alternating between the deployments (warm-up round first). Then a round of requests sharing a long prompt prefix, to show the
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


def run_round(client, prompts, max_tokens, no_end):
    started = time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as pool:
        list(pool.map(lambda p: client.generate(p, max_tokens=max_tokens, temperature=0, logit_bias=no_end), prompts))
    return time.perf_counter() - started


def deploy(model: str, replicas: int, threads: int, requests: int):
    app_name = f"bench-{replicas}"
    app = muser.ray.deployment(model, num_replicas=replicas, threads=threads, slots=4,
                               max_waiting=max(4, requests), max_queued_requests=requests, app_name=app_name)
    handle = serve.run(app, name=app_name, route_prefix=None)
    return app_name, muser.ray.Client(handle)


def shared_prefix_round(app_name: str, client, requests: int) -> int:
    """Requests sharing a long prefix, one after another; returns prompt tokens reused from cache."""
    before = muser.ray.reused_prefix_tokens(app_name)
    for i in range(requests):
        client.generate(SHARED + f"Question {i}: what happened in {1871 + i * 10}?", max_tokens=4, temperature=0)
    time.sleep(1.0)  # replicas post their stats without waiting
    return muser.ray.reused_prefix_tokens(app_name) - before


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
    engine = muser.Engine(model, threads=1)
    no_end = {token: float("-inf") for token in engine.eog_ids}  # every request generates max_tokens
    first, second = (engine.tokenize(SHARED + f"Question {i}: what happened in {1871 + i * 10}?") for i in (0, 1))
    shared_tokens = next((i for i, (x, y) in enumerate(zip(first, second)) if x != y), len(first))
    # Every configuration is deployed at once (idle replicas cost no CPU) and
    # their rounds alternate, so a busy moment on the machine hits them alike.
    ray.init(num_cpus=sum(args.replicas) * args.threads, include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    apps = {n: deploy(model, n, args.threads, args.requests) for n in args.replicas}
    prompts = [f"Request {i}: write a short note about the number {i * 7}." for i in range(args.requests)]
    for _, client in apps.values():
        run_round(client, prompts, 4, no_end)  # warm-up: every replica has served
    times: dict[int, list[float]] = {n: [] for n in args.replicas}
    for _ in range(args.rounds):
        for n, (_, client) in apps.items():
            times[n].append(run_round(client, prompts, args.max_tokens, no_end))
    rows = []
    for n, (app_name, client) in apps.items():
        best = min(times[n])
        rows.append((n, best, args.requests * args.max_tokens / best, shared_prefix_round(app_name, client,
                                                                                            args.requests)))
    serve.shutdown()
    ray.shutdown()

    print(f"\n{args.requests} concurrent greedy requests x {args.max_tokens} tokens, {args.threads} thread(s) "
          f"per replica, best of {args.rounds}:")
    print(f"| replicas | wall s | generated tok/s | vs {rows[0][0]} replica(s) | prompt tokens reused, "
          f"{args.requests} requests sharing a {shared_tokens}-token prefix |")
    print("|---|---|---|---|---|")
    base = rows[0][2]
    for replicas, best, tok_s, reused in rows:
        print(f"| {replicas} | {best:.2f} | {tok_s:.1f} | {tok_s / base:.2f}x | {reused} |")


if __name__ == "__main__":
    main()
