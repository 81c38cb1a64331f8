"""muser replicas on Ray Serve, called from your own code through a handle.

    pip install "muser[ray]"
    python examples/ray_serve_app.py --replicas 2 --threads 1

Starts a local Ray cluster (or joins one: set RAY_ADDRESS, see the README's
"Past one machine" section), deploys N replicas of a registry model, then
sends chats that share a long system prompt (they land on the replica that
already holds it) and a burst of unrelated prompts (they go to the
least-loaded replicas). Prints where requests went, the prompt tokens
reused from cache across replicas, and throughput.

muser ships no HTTP server: put your own FastAPI/Starlette ingress in front
of `client` (or of the raw `DeploymentHandle`).
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import ray
from ray import serve

import muser
import muser.ray

SYSTEM = ("You are the support assistant of the Point Rowe lighthouse museum. Answer briefly and kindly. "
          "Opening hours: 9 to 17, closed on Mondays. Tickets: 8 euros, children free. ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="registry key or GGUF path")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="compute threads per replica")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=24)
    args = parser.parse_args()

    if not args.model.endswith(".gguf"):
        muser.models.fetch(args.model)  # once, before the replicas start
    ray.init(include_dashboard=False, log_to_driver=False)  # or ray.init(address="auto") on a cluster
    serve.start(proxy_location="Disabled")  # no Serve HTTP proxy: calls come through the handle
    app = muser.ray.deployment(args.model, num_replicas=args.replicas, threads=args.threads, slots=args.slots,
                               app_name="muser-example")
    handle = serve.run(app, name="muser-example", route_prefix=None)
    client = muser.ray.Client(handle)

    chats = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
             for question in ("When are you open?", "How much is a ticket?", "Is it open on Monday?",
                              "Do children pay?", "Can I bring a dog?", "Where do I park?")]
    prompts = [f"Write one line about the number {i}." for i in range(max(0, args.requests - len(chats)))]

    started = time.perf_counter()
    # A conversation's turns arrive one after another: each finds the system
    # prompt in a slot of the replica the router sends it to (a slot holds one
    # copy of a prefix, so requests arriving at the same instant would each
    # compute it once).
    replies = [client.chat(chat, max_tokens=args.max_tokens, temperature=0) for chat in chats]
    # Unrelated prompts in a burst: spread over the least-loaded replicas.
    with ThreadPoolExecutor(max(1, len(prompts))) as pool:
        replies += list(pool.map(lambda p: client.generate(p, max_tokens=args.max_tokens, temperature=0), prompts))
    elapsed = time.perf_counter() - started
    for chat, reply in zip(chats, replies):
        print(f"Q: {chat[1]['content']}\nA: {reply.strip()}\n")

    time.sleep(0.5)  # replicas post their stats without waiting
    stats = muser.ray.replica_stats("muser-example")
    for replica, s in sorted(stats.items()):
        print(f"{replica}: {s['admission']['admissions']} requests, "
              f"{s['reused_prefix_tokens']} prompt tokens reused from cache")
    print(f"reused prompt tokens across replicas: {muser.ray.reused_prefix_tokens('muser-example')}")
    print(f"{len(replies)} requests in {elapsed:.1f} s")
    serve.shutdown()  # type: ignore[no-untyped-call]  # (ray's own function has no annotations)
    ray.shutdown()


if __name__ == "__main__":
    main()
