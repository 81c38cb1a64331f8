"""The prefix-affinity rule of muser.ray's request router, without a cluster:
routing keys, shared prefixes, and which replica ranks first."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

pytest.importorskip("ray.serve.request_router", reason='muser.ray needs Ray Serve: pip install "muser[ray]"')

from muser.ray.router import PrefixAffinityRouter, routing_key, shared_prefix  # noqa: E402


def test_routing_keys_are_the_prompt_text_tokens_or_messages_in_order():
    assert routing_key("generate", ("Hello there",), {}) == "Hello there"
    assert routing_key("stream", (), {"prompt": [1, 2, 3]}) == (1, 2, 3)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    longer = chat + [{"role": "assistant", "content": "Hello!"}]
    assert routing_key("chat", (longer,), {}).startswith(routing_key("chat_stream", (chat,), {}))
    assert routing_key("stats", (), {}) is None
    assert routing_key("generate", (42,), {}) is None


@pytest.mark.parametrize("a, b, n", [("abcdef", "abcxyz", 3), ("abc", "abc", 3), ("", "abc", 0), ("abc", "ab", 2),
                                     ((1, 2, 3), (1, 2, 4), 2), ("abc", (1, 2), 0), ("x" * 5000 + "a", "x" * 5000, 5000)])
def test_shared_prefix_is_the_length_of_the_common_start(a, b, n):
    assert shared_prefix(a, b) == n


@dataclass
class FakeReplica:
    replica_id: str
    max_ongoing_requests: int = 6


@dataclass
class FakeQueueLens:
    lens: dict = field(default_factory=dict)

    def get(self, replica_id):
        return self.lens.get(replica_id)


@dataclass
class FakeMetadata:
    call_method: str


@dataclass
class FakeRequest:
    args: tuple
    kwargs: dict
    metadata: FakeMetadata


def _router(**options) -> PrefixAffinityRouter:
    # The rule under test needs only the router's own state and the queue-length
    # cache; skip Ray's constructor (it wants a running controller).
    router = PrefixAffinityRouter.__new__(PrefixAffinityRouter)
    router.initialize_state(**options)
    router._queue_lens = FakeQueueLens()
    return router


@pytest.fixture
def router(monkeypatch):
    r = _router(min_shared_prefix=8, max_imbalance=2)
    monkeypatch.setattr(PrefixAffinityRouter, "replica_queue_len_cache", property(lambda self: self._queue_lens))
    return r


def _choose(router, replicas, prompt, method="generate"):
    request = FakeRequest((prompt,), {}, FakeMetadata(method))
    ranks = asyncio.run(router.choose_replicas(replicas, request))
    return [[r.replica_id for r in rank] for rank in ranks]


def _routed(router, replica, prompt, method="generate"):
    router.on_request_routed(FakeRequest((prompt,), {}, FakeMetadata(method)), replica.replica_id, None)


def test_a_prompt_sharing_a_long_prefix_ranks_the_replica_that_served_it_first(router):
    a, b = FakeReplica("a"), FakeReplica("b")
    _routed(router, b, "System: you answer questions about lighthouses. Q: when?")
    _routed(router, a, "Something else entirely")
    assert _choose(router, [a, b], "System: you answer questions about lighthouses. Q: where?") == [["b"], ["a"]]
    assert router.affinity_routed == 0 and router.load_routed == 2


def test_without_a_long_enough_shared_prefix_every_replica_is_one_rank_least_loaded_first(router):
    a, b = FakeReplica("a"), FakeReplica("b")
    _routed(router, b, "System: lighthouses")
    assert _choose(router, [a, b], "Sys: other") == [["a", "b"]]  # Ray then takes the lowest queue with room
    assert _choose(router, [a, b], None, method="stats") == [["a", "b"]]


def test_a_preferred_replica_much_busier_than_the_least_loaded_is_not_preferred(router):
    a, b = FakeReplica("a"), FakeReplica("b")
    _routed(router, b, "A long shared system prompt, then a question")
    router._queue_lens.lens = {"a": 0, "b": 3}
    assert _choose(router, [a, b], "A long shared system prompt, then another") == [["a", "b"]]
    router._queue_lens.lens = {"a": 0, "b": 2}
    assert _choose(router, [a, b], "A long shared system prompt, then another") == [["b"], ["a"]]


def test_the_longest_shared_prefix_wins_and_a_dead_replica_is_forgotten(router, monkeypatch):
    a, b = FakeReplica("a"), FakeReplica("b")
    _routed(router, a, "Document one: the lighthouse keeper's log, page 1")
    _routed(router, b, "Document one: the lighthouse keeper's log, page 2 and more")
    assert _choose(router, [a, b], "Document one: the lighthouse keeper's log, page 2 again") == [["b"], ["a"]]
    monkeypatch.setattr("ray.serve.request_router.RequestRouter.on_replica_actor_died", lambda self, rid: None)
    router.on_replica_actor_died("b")
    assert _choose(router, [a], "Document one: the lighthouse keeper's log, page 2 again") == [["a"]]
