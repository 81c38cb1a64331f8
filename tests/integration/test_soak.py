"""Soak (issue 14): 400 requests on 4 slots from 12 client threads, with
random cancellations, deadlines, slow consumers, consumers that raise, and
clients sending invalid tokens. Every request ends with a result or a typed
error; no thread or slot leaks; memory does not grow with traffic (RSS after
the soak within 5% of RSS after the first 50 requests)."""

from __future__ import annotations

import gc
import os
import random
import threading
import time

import pytest

import muser
from tests.fixtures.tiny_models import write_tiny_model

REQUESTS = 400
CLIENTS = 12


class ConsumerFailure(RuntimeError):
    """What a consumer in the soak raises halfway through reading its stream."""


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _one_request(pool: muser.SlotPool, engine: muser.Engine, i: int) -> str:
    """Runs request i; returns how it ended ("text", "cancelled", or the error's class name)."""
    rng = random.Random(i)
    n_vocab = engine.n_vocab
    prompt = [rng.randrange(n_vocab) for _ in range(rng.randint(2, 40))]
    kind = rng.choice(["generate", "stream", "slow", "cancel", "deadline", "raise", "invalid", "slot"])
    max_tokens = rng.randint(4, 48)
    try:
        if kind == "generate":
            muser.generate(pool, prompt, max_tokens=max_tokens, temperature=0.8, seed=i)
            return "text"
        if kind in ("stream", "slow"):
            with muser.stream(pool, prompt, max_tokens=max_tokens, seed=i, consumer_timeout=0.2) as chunks:
                last = None
                for last in chunks:
                    if kind == "slow":
                        time.sleep(0.003)
            assert last is not None and last.finish_reason in ("stop", "length")
            return "text"
        if kind == "cancel":
            token = muser.CancelToken()
            # Every third one is cancelled before it starts, so cancellations are
            # seen however the machine's load shifts the timers.
            if i % 3 == 0:
                token.cancel()
            else:
                threading.Timer(rng.uniform(0, 0.05), token.cancel).start()
            chunks = list(muser.stream(pool, prompt, max_tokens=max_tokens, cancel=token, seed=i))
            return "cancelled" if chunks[-1].finish_reason == "cancelled" else "text"
        if kind == "deadline":
            timeout = 1e-6 if i % 3 == 0 else rng.uniform(0.001, 0.1)  # some surely expire
            muser.generate(pool, prompt, max_tokens=max_tokens, seed=i, timeout=timeout)
            return "text"
        if kind == "raise":
            with muser.stream(pool, prompt, max_tokens=max_tokens, seed=i) as chunks:
                for n, _ in enumerate(chunks):
                    if n == 2:
                        raise ConsumerFailure("the consumer failed")
            return "text"
        if kind == "invalid":
            muser.generate(pool, prompt + [n_vocab + rng.randint(0, 100)], max_tokens=max_tokens)
            return "text"
        # A client driving a slot directly sends one bad token among good ones.
        with pool.acquire(prompt, timeout=30) as slot:
            slot.prefill(prompt[slot.reused_tokens:])
            outcome = "text"
            for step in range(min(max_tokens, 12)):
                try:
                    slot.decode(n_vocab + 7 if step == 3 else rng.randrange(n_vocab))
                except ValueError:
                    outcome = "ValueError"
            return outcome
    except (muser.Cancelled, muser.DeadlineExceeded, ValueError, ConsumerFailure) as exc:
        return type(exc).__name__


@pytest.mark.slow
def test_four_hundred_mixed_requests_end_typed_and_leak_nothing(tmp_path):
    engine = muser.Engine(write_tiny_model(tmp_path / "soak.gguf", weight_type="Q8_0", context_length=512),
                          threads=2)
    pool = muser.SlotPool(engine, slots=4, max_context=512)
    threads_before = {t.ident for t in threading.enumerate()}
    next_index = iter(range(REQUESTS))
    index_lock = threading.Lock()
    outcomes: list[str] = []
    unexpected: list[BaseException] = []
    rss_after_50: list[int] = []

    def client() -> None:
        while True:
            with index_lock:
                i = next(next_index, None)
            if i is None:
                return
            try:
                outcome = _one_request(pool, engine, i)
            except BaseException as exc:  # anything untyped fails the test below
                unexpected.append(exc)
                outcome = "unexpected"
            with index_lock:
                outcomes.append(outcome)
                if len(outcomes) == 50:
                    gc.collect()
                    rss_after_50.append(_rss_bytes())

    clients = [threading.Thread(target=client, name=f"soak-client-{c}") for c in range(CLIENTS)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(timeout=600)
        assert not t.is_alive(), "a soak client hung"

    assert not unexpected, repr(unexpected[:3])
    assert len(outcomes) == REQUESTS
    kinds = set(outcomes)
    assert {"text", "ValueError", "ConsumerFailure"} <= kinds, kinds
    assert kinds & {"cancelled", "Cancelled"} and "DeadlineExceeded" in kinds, kinds

    give_up = time.monotonic() + 30
    while time.monotonic() < give_up and any(
            t.name.startswith("muser-request") for t in threading.enumerate()):
        time.sleep(0.05)
    leftover = [t.name for t in threading.enumerate() if t.ident not in threads_before]
    assert leftover == [], leftover
    stats = pool.stats()
    assert stats["admission"]["in_use"] == 0 and stats["admission"]["waiting"] == 0
    assert pool.healthy, pool.unhealthy_reason
    requests = stats["requests"]
    # (Invalid prompt tokens are refused before a request starts, so none "failed".)
    assert requests["deadline_exceeded"] >= 1 and requests["cancelled"] >= 1

    gc.collect()
    assert _rss_bytes() <= rss_after_50[0] * 1.05, (_rss_bytes(), rss_after_50[0])
