"""muser replicas on Ray Serve: past one machine (``pip install "muser[ray]"``).

One process owns one accelerator, so more traffic means more replicas. This
module makes a Ray Serve deployment in which each replica owns one
:class:`muser.Engine` and one :class:`muser.SlotPool`; Ray Serve places the
replicas (on one machine or many), and muser adds what is particular to it:

- **admission mapped onto Ray's**: a replica accepts ``slots + max_waiting``
  requests (``max_ongoing_requests``), exactly what its pool admits; each
  caller queues at most ``max_queued_requests`` more, then gets an error
  (:class:`Client` raises :class:`muser.Overloaded`), never an unbounded queue;
- **prefix-affinity routing** (:class:`PrefixAffinityRouter`, Ray Serve's
  request-router extension point): requests sharing a long prompt prefix go
  to the replica that holds it, else to the least-loaded replica;
- **health**: a replica whose pool latched unhealthy fails its health check
  and Ray Serve replaces it;
- **cancellation** across the boundary: a cancelled response or a dropped
  stream frees the slot on its replica;
- **telemetry** of every replica in one place (:func:`replica_stats`,
  :func:`reused_prefix_tokens`).

Example (muser ships no HTTP server; a FastAPI ingress would be yours)::

    from ray import serve
    import muser.ray

    handle = serve.run(muser.ray.deployment("smollm2-135m", num_replicas=2, threads=1), name="llm")
    client = muser.ray.Client(handle)
    client.generate("The capital of France is", max_tokens=16, temperature=0)
    for chunk in client.stream("Once upon a time", max_tokens=64):
        print(chunk.text, end="")
"""

from __future__ import annotations

from typing import Any, cast

try:
    import ray  # noqa: F401
    from ray import serve
    from ray.serve.config import RequestRouterConfig
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError('muser.ray needs Ray Serve: pip install "muser[ray]"') from exc

from muser.ray.client import Client, ReplicaLost
from muser.ray.router import PrefixAffinityRouter
from muser.ray.server import MuserServer
from muser.ray.stats import board_name, replica_stats, reused_prefix_tokens

__all__ = [
    "Client",
    "MuserServer",
    "PrefixAffinityRouter",
    "ReplicaLost",
    "deployment",
    "replica_stats",
    "reused_prefix_tokens",
]


def deployment(
    model: str = "smollm2-135m",
    *,
    num_replicas: int | str = 1,
    slots: int = 4,
    max_waiting: int = 4,
    threads: int | None = None,
    backend: str = "auto",
    max_context: int | None = None,
    ray_actor_options: dict[str, Any] | None = None,
    max_queued_requests: int | None = None,
    prefix_routing: bool = True,
    router_options: dict[str, Any] | None = None,
    name: str = "MuserServer",
    app_name: str = "default",
    engine_options: dict[str, Any] | None = None,
    **deployment_options: Any,
) -> Any:
    """A Ray Serve application of muser replicas, ready for ``serve.run``.

    Args:
        model: a GGUF path (present on every node) or a registry key, fetched on each node.
        num_replicas: replicas (or ``"auto"`` with an ``autoscaling_config``).
        slots, max_waiting, max_context: each replica's :class:`muser.SlotPool`.
        threads, backend, engine_options: each replica's :class:`muser.Engine`.
        ray_actor_options: Ray resources per replica; default
            ``{"num_cpus": threads or 1}`` (pass ``{"num_gpus": 1}`` for one per GPU).
        max_queued_requests: requests each caller may hold that no replica has
            taken yet (Ray Serve counts requests still being routed, so a burst
            needs room here even when replicas have some); default 64, the
            bound a local pool puts on its waiters. Never unbounded.
        prefix_routing: route by shared prompt prefix (:class:`PrefixAffinityRouter`);
            False keeps Ray Serve's default router.
        router_options: :class:`PrefixAffinityRouter` keyword arguments.
        name: the deployment's name.
        app_name: the application name you will pass to ``serve.run(..., name=...)``
            (replicas post their stats under it; :func:`replica_stats` reads them).
        deployment_options: any other ``@serve.deployment`` option
            (``health_check_period_s``, ``autoscaling_config``, ...).

    Returns:
        A bound application: ``handle = serve.run(app, name=app_name)``.
    """
    options: dict[str, Any] = {
        "name": name,
        "num_replicas": num_replicas,
        "max_ongoing_requests": slots + max_waiting,
        "max_queued_requests": 64 if max_queued_requests is None else max_queued_requests,
        "ray_actor_options": ray_actor_options if ray_actor_options is not None else {"num_cpus": threads or 1},
    }
    if prefix_routing:
        options["request_router_config"] = RequestRouterConfig(
            request_router_class=cast(Any, PrefixAffinityRouter), request_router_kwargs=dict(router_options or {}))
    options.update(deployment_options)
    server = cast(Any, serve.deployment)(MuserServer).options(**options)
    return server.bind(model, backend=backend, threads=threads, slots=slots, max_waiting=max_waiting,
                       max_context=max_context, engine_options=engine_options,
                       stats_name=board_name(app_name, name))
