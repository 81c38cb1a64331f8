"""muser replicas on Ray Serve (muser.ray), on a local Ray cluster this module
starts: two replicas of smollm2-135m with one compute thread each.

Waits are bounded by outcomes (polling the replicas' posted stats), with
generous limits: a loaded 2-core machine starts Ray slowly.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

ray = pytest.importorskip("ray", reason='muser.ray needs Ray Serve: pip install "muser[ray]"')
from ray import serve  # noqa: E402

import muser  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.real_model]

APP = "muser-test"
SLOTS, MAX_WAITING = 4, 2  # 6 requests per replica
MAX_QUEUED = 8  # requests this caller may hold that no replica has taken yet


def _wait_for(condition, timeout: float = 120.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


@pytest.fixture(scope="module")
def cluster(smollm2_path):
    import muser.ray

    # Replicas import muser from wherever this process does (a source tree or site-packages).
    package_root = os.path.dirname(os.path.dirname(muser.__file__))
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": package_root}})
    try:
        serve.start(proxy_location="Disabled")
        app = muser.ray.deployment(os.fspath(smollm2_path), num_replicas=2, threads=1, slots=SLOTS,
                                   max_waiting=MAX_WAITING, max_queued_requests=MAX_QUEUED, app_name=APP,
                                   health_check_period_s=1.0)
        handle = serve.run(app, name=APP, route_prefix=None)
        client = muser.ray.Client(handle)
        _wait_for(lambda: len(muser.ray.replica_stats(APP)) == 2, what="both replicas to report")
        yield client
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def endless(smollm2_path):
    """Sampling options that ban the model's end tokens: a stream runs until max_tokens."""
    eog = muser.Engine(smollm2_path, threads=1).eog_ids
    return {"temperature": 0.0, "logit_bias": {token: float("-inf") for token in eog}}


def _live_stats():
    import muser.ray

    live = {}
    for replica, stats in muser.ray.replica_stats(APP).items():
        try:
            ray.get_actor(replica, namespace="serve")
        except ValueError:
            continue  # a replica that was replaced or killed keeps its last post
        live[replica] = stats
    return live


def _requests(stats, outcome: str) -> int:
    return sum(s["replica_requests"].get(outcome, 0) for s in stats.values())


def test_a_replica_generates_what_a_local_engine_generates_for_the_same_seed(cluster, smollm2_path):
    local = muser.Engine(smollm2_path, threads=1)
    for options in ({"temperature": 0.0}, {"temperature": 0.8, "seed": 11}):
        expected = muser.generate(local, "The old lighthouse keeper", max_tokens=12, **options)
        assert cluster.generate("The old lighthouse keeper", max_tokens=12, **options) == expected
        streamed = "".join(c.text for c in cluster.stream("The old lighthouse keeper", max_tokens=12, **options))
        assert streamed == expected
    chat = [{"role": "user", "content": "Say hello."}]
    assert cluster.chat(chat, max_tokens=8, temperature=0) == muser.chat(local, chat, max_tokens=8, temperature=0)


def test_openai_shaped_calls_on_a_replica_match_a_local_engine(cluster, smollm2_path):
    local = muser.Engine(smollm2_path, threads=1)
    messages = [{"role": "user", "content": "Name a colour."}]
    expected = muser.openai.create_chat_completion(local, messages, max_tokens=8, temperature=0)
    reply = cluster.create_chat_completion(messages, max_tokens=8, temperature=0)
    assert reply["choices"][0]["message"] == expected["choices"][0]["message"]
    assert reply["usage"] == expected["usage"]
    chunks = list(cluster.create_chat_completion(messages, stream=True, max_tokens=8, temperature=0))
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == \
        expected["choices"][0]["message"]["content"]
    text = muser.openai.create_completion(local, "Roses are", max_tokens=6, temperature=0)["choices"][0]["text"]
    assert cluster.create_completion("Roses are", max_tokens=6, temperature=0)["choices"][0]["text"] == text


def test_eight_concurrent_requests_all_complete(cluster):
    prompts = [f"Request {i}: the weather today is" for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(lambda p: cluster.generate(p, max_tokens=10, temperature=0), prompts))
    assert len(texts) == 8 and all(isinstance(t, str) and t for t in texts)


def test_requests_sharing_a_long_prefix_land_on_the_replica_that_holds_it(cluster):
    prefix = ("You are a careful assistant. Answer in one short sentence, citing the document below. "
              "Document: The lighthouse at Point Rowe was built in 1871 and automated in 1962. ") * 2
    before = _live_stats()
    for question in ("When was it built?", "When was it automated?", "Where is it?", "Who built it?"):
        cluster.generate(prefix + "Question: " + question, max_tokens=4, temperature=0)
    after = _wait_for(lambda: (s := _live_stats()) and sum(x["admission"]["admissions"] for x in s.values())
                      >= sum(x["admission"]["admissions"] for x in before.values()) + 4 and s,
                      what="the replicas to post their admissions")
    served = {r: after[r]["admission"]["admissions"] - before.get(r, {"admission": {"admissions": 0}})
              ["admission"]["admissions"] for r in after}
    assert sorted(served.values()) == [0, 4], served
    (home,) = [r for r, n in served.items() if n == 4]
    reused = after[home]["reused_prefix_tokens"] - before[home]["reused_prefix_tokens"]
    assert reused >= 3 * 30, f"the shared prefix was recomputed: {reused} tokens reused"


def test_dropping_a_stream_cancels_the_request_on_its_replica_and_frees_the_slot(cluster, endless):
    cancelled_before = _requests(_live_stats(), "cancelled")
    stream = cluster.stream("Write a very long story about the sea.", max_tokens=2000, **endless)
    next(stream)
    next(stream)
    stream.close()
    stats = _wait_for(lambda: (s := _live_stats()) and _requests(s, "cancelled") > cancelled_before
                      and all(x["admission"]["in_use"] == 0 for x in s.values()) and s,
                      what="the replica to end the dropped request")
    assert all(x["admission"]["in_use"] == 0 for x in stats.values())


def test_more_requests_than_replicas_admit_and_callers_queue_get_overloaded(cluster, endless):
    capacity = 2 * (SLOTS + MAX_WAITING) + MAX_QUEUED
    outcomes: list[object] = []
    lock = threading.Lock()

    # Admitted requests run a full 256 tokens (no end token), so they hold
    # their places for seconds.
    def call(i: int) -> None:
        try:
            result: object = cluster.generate(f"Overload {i}: count to forty", max_tokens=256, **endless)
        except muser.Overloaded as exc:
            result = exc
        with lock:
            outcomes.append(result)

    # Two waves: Ray checks a caller's queue when a request arrives, so
    # callers that all arrive at once may all pass the check before any is
    # counted (a CI run saw 40 simultaneous callers all admitted in turn).
    # The first wave fills the replicas and the caller's queue; the second
    # arrives at a full queue.
    first = [threading.Thread(target=call, args=(i,)) for i in range(capacity)]
    for thread in first:
        thread.start()
    _wait_for(lambda: sum(s["admission"]["in_use"] for s in _live_stats().values()) >= 2 * SLOTS,
              what="the first callers to fill the replicas' slots")
    time.sleep(1.0)  # the rest of the first wave reaches the caller's queue
    second = [threading.Thread(target=call, args=(i,)) for i in range(capacity, 2 * capacity)]
    for thread in second:
        thread.start()
    for thread in first + second:
        thread.join(timeout=300)
        assert not thread.is_alive()
    overloaded = [o for o in outcomes if isinstance(o, muser.Overloaded)]
    assert overloaded, "no caller was told the deployment was overloaded"
    assert "max_queued_requests" in str(overloaded[0])
    assert len(outcomes) - len(overloaded) >= 2 * SLOTS  # the admitted ones completed


def test_a_replica_whose_pool_latched_unhealthy_is_replaced(cluster):
    import muser.ray

    marked = cluster.handle.mark_unhealthy.remote("test: latch this replica").result()
    _wait_for(lambda: marked not in _live_stats(), what="Ray Serve to stop the unhealthy replica")
    _wait_for(lambda: len(_live_stats()) == 2, what="a replacement replica")
    assert cluster.generate("After the replacement,", max_tokens=4, temperature=0)
    assert marked in muser.ray.replica_stats(APP)  # its last post stays on the board


def test_killing_a_replica_mid_stream_gives_its_callers_a_typed_error_and_the_survivor_serves(cluster, endless):
    import muser.ray

    streams = []
    # Open streams until both replicas are generating.
    for i in range(8):
        stream = cluster.stream(f"Stream {i}: a long list of the world's rivers", max_tokens=2000, **endless)
        next(stream)
        streams.append(stream)
        if len([s for s in _live_stats().values() if s["admission"]["in_use"] > 0]) == 2:
            break
    busy = {r for r, s in _live_stats().items() if s["admission"]["in_use"] > 0}
    assert len(busy) == 2, "the streams did not spread over both replicas"
    victim = sorted(busy)[0]
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)

    lost = 0
    for stream in streams:
        try:
            for _ in range(150):  # past what a replica could have sent before the kill
                next(stream)
        except muser.ray.ReplicaLost:
            lost += 1
        finally:
            stream.close()
    assert lost >= 1, "no caller of the killed replica got ReplicaLost"
    assert lost < len(streams), "streams on the surviving replica failed too"

    # The router drops the dead replica; later requests succeed (on the survivor
    # or on the replacement Ray Serve starts).
    def succeeds() -> bool:
        try:
            return bool(cluster.generate("After the failure,", max_tokens=4, temperature=0))
        except muser.ray.ReplicaLost:
            return False

    _wait_for(succeeds, what="a request to succeed after the kill")
    for i in range(4):
        assert cluster.generate(f"Later request {i}", max_tokens=4, temperature=0)
