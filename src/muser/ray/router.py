"""Prefix-affinity request routing for muser replicas, as a Ray Serve request router.

A replica's slots keep the KV of the prompts they served, and a new prompt
that starts like one of them skips recomputing that prefix (SlotPool's
``reused_tokens``). Across replicas the same rule applies one level up: send
a request to the replica whose recent prompts share the longest prefix with
it, so the prefix is found in one of its slots.

The router runs inside each caller's ``DeploymentHandle`` (Ray Serve's
request-router extension point, ``RequestRouterConfig``). It remembers, per
replica, the routing keys of the last requests it sent there (the prompt
text, token ids, or chat messages), and for a new request:

1. finds the replica whose remembered keys share the longest prefix with the
   request (ties: the least loaded); if that prefix is at least
   ``min_shared_prefix`` long (characters of text, tokens, or message
   characters) and that replica is not more than ``max_imbalance`` requests
   busier than the least loaded one, it is tried first;
2. otherwise, or when the preferred replica is full, the least-loaded replica
   with room takes it (Ray Serve's queue-length probing picks the lowest
   queue among the remaining candidates).

Each caller process has its own memory (there is no shared state to
coordinate); with one ingress process, that is all of them.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ray.serve.request_router import (  # type: ignore[attr-defined]  # ReplicaResult is not re-exported
    PendingRequest,
    ReplicaID,
    ReplicaResult,
    RequestRouter,
    RunningReplica,
)

__all__ = ["PrefixAffinityRouter", "routing_key", "shared_prefix"]

# The methods whose first argument (or `prompt` / `messages` keyword) is what a slot caches.
_PROMPT_METHODS = {
    "generate": "prompt", "stream": "prompt", "chat": "messages", "chat_stream": "messages",
    "create_chat_completion": "messages", "create_chat_completion_stream": "messages",
    "create_completion": "prompt", "create_completion_stream": "prompt",
}


def routing_key(method: str, args: Any, kwargs: Any) -> str | tuple[int, ...] | None:
    """What a request's prompt starts with, comparable between requests: the
    prompt text, its token ids, or the chat messages joined in order. ``None``
    for calls that carry no prompt."""
    name = _PROMPT_METHODS.get(method)
    if name is None:
        return None
    value = args[0] if args else (kwargs or {}).get(name)
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(t, int) for t in value):
        return tuple(value)
    if isinstance(value, (list, tuple)) and all(isinstance(m, dict) for m in value):
        # Roles and contents in order: a chat that continues another shares its prefix.
        return "".join(f"\x1e{m.get('role', '')}\x1f{m.get('content', '')}" for m in value)
    return None


def shared_prefix(a: Any, b: Any) -> int:
    """Length of the common prefix of two keys of the same kind (0 across kinds)."""
    if type(a) is not type(b):
        return 0
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    # Binary search on slice equality: C-speed comparisons, O(n log n).
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class PrefixAffinityRouter(RequestRouter):
    """Routes requests that share a long prompt prefix to the same replica,
    falling back to the least-loaded replica (see the module docstring).

    Not FIFO-mixed: with Ray Serve's FIFOMixin a replica chosen for one
    request's prefix would be handed to whichever request is oldest, so
    during a burst prefixes would land anywhere.

    Configure through ``RequestRouterConfig(request_router_class=PrefixAffinityRouter,
    request_router_kwargs={...})``; :func:`muser.ray.deployment` does this.

    Keyword arguments (``request_router_kwargs``):
        min_shared_prefix: the shortest shared prefix worth routing for (default 16).
        max_imbalance: how many more ongoing requests the preferred replica may
            have than the least loaded one (default 2).
        remembered: routing keys remembered per replica (default 16).
    """

    def initialize_state(self, min_shared_prefix: int = 16, max_imbalance: int = 2, remembered: int = 16,
                         **kwargs: Any) -> None:
        self._min_shared_prefix = int(min_shared_prefix)
        self._max_imbalance = int(max_imbalance)
        self._remembered = int(remembered)
        self._recent: dict[ReplicaID, deque[Any]] = {}
        self.affinity_routed = 0
        self.load_routed = 0

    def _load(self, replica: RunningReplica) -> int:
        queue_len = self.replica_queue_len_cache.get(replica.replica_id)
        return 0 if queue_len is None else queue_len

    def _preferred(self, candidates: list[RunningReplica], key: Any) -> RunningReplica | None:
        best, best_shared = None, 0
        for replica in candidates:
            shared = max((shared_prefix(key, k) for k in self._recent.get(replica.replica_id, ())), default=0)
            if shared > best_shared or (shared == best_shared and best is not None
                                        and self._load(replica) < self._load(best)):
                best, best_shared = replica, shared
        if best is None or best_shared < self._min_shared_prefix:
            return None
        least = min(self._load(r) for r in candidates)
        return best if self._load(best) <= least + self._max_imbalance else None

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        key = None
        if pending_request is not None:
            key = routing_key(pending_request.metadata.call_method, pending_request.args, pending_request.kwargs)
        preferred = self._preferred(candidate_replicas, key) if key is not None else None
        if preferred is None:
            # One rank: Ray Serve sends to the candidate with the lowest queue that has room.
            return [list(candidate_replicas)]
        rest = [r for r in candidate_replicas if r.replica_id != preferred.replica_id]
        return [[preferred], rest] if rest else [[preferred]]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID,
                          result: ReplicaResult) -> None:
        key = routing_key(pending_request.metadata.call_method, pending_request.args, pending_request.kwargs)
        if key is None:
            return
        recent = self._recent.setdefault(replica_id, deque(maxlen=self._remembered))
        preferred = max((shared_prefix(key, k) for k in recent), default=0) >= self._min_shared_prefix
        if preferred:
            self.affinity_routed += 1
        else:
            self.load_routed += 1
        recent.appendleft(key)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        self._recent.pop(replica_id, None)
        super().on_replica_actor_died(replica_id)
