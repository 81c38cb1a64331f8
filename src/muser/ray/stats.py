"""A small board where each replica posts its pool's telemetry, so a caller can
see every replica at once (which replica served what, reused prefix tokens
across replicas) without addressing replicas one by one.

The board is a named, detached Ray actor (no CPU reserved) in Serve's
namespace, created by the first replica that reports. Replicas post after
each request, without waiting for the board; a replica that dies keeps its
last post, so totals count all the work done.
"""

from __future__ import annotations

from typing import Any, cast

import ray

__all__ = ["board_name", "replica_stats", "report_stats", "reused_prefix_tokens"]

_NAMESPACE = "serve"


@ray.remote(num_cpus=0)
class _StatsBoard:
    def __init__(self) -> None:
        self.posts: dict[str, dict[str, Any]] = {}

    def post(self, replica: str, stats: dict[str, Any]) -> None:
        self.posts[replica] = stats

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return dict(self.posts)


def board_name(app_name: str, deployment_name: str) -> str:
    return f"muser-stats:{app_name}:{deployment_name}"


_boards: dict[str, Any] = {}  # handles this process already holds, by board name


def _board(name: str, create: bool) -> Any:
    if not create:
        return ray.get_actor(name, namespace=_NAMESPACE)
    if name not in _boards:
        _boards[name] = cast(Any, _StatsBoard).options(name=name, namespace=_NAMESPACE, lifetime="detached",
                                            get_if_exists=True).remote()
    return _boards[name]


def report_stats(name: str, replica: str, stats: dict[str, Any]) -> None:
    """Post one replica's stats (fire and forget; never raises into a request)."""
    try:
        _board(name, create=True).post.remote(replica, stats)
    except Exception:  # the board is telemetry: a failed post must not fail a request
        pass


def replica_stats(app_name: str = "default", deployment_name: str = "MuserServer",
                  timeout: float = 30.0) -> dict[str, dict[str, Any]]:
    """Each replica's latest ``stats()`` (its pool's telemetry), keyed by replica id.

    Raises:
        ValueError: no replica of that deployment has reported yet.
    """
    snapshot = ray.get(_board(board_name(app_name, deployment_name), create=False).snapshot.remote(), timeout=timeout)
    return cast("dict[str, dict[str, Any]]", snapshot)


def reused_prefix_tokens(app_name: str = "default", deployment_name: str = "MuserServer") -> int:
    """Prompt tokens found already cached in a slot, summed over every replica."""
    return sum(s["reused_prefix_tokens"] for s in replica_stats(app_name, deployment_name).values())
