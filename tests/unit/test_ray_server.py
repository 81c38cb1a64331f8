"""muser.ray's replica class on its own (no cluster), on muser.testing's null
engine: its async methods generate like muser, and a cancelled or dropped
call frees its slot."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("ray.serve", reason='muser.ray needs Ray Serve: pip install "muser[ray]"')

import muser  # noqa: E402
from muser.ray.server import MuserServer  # noqa: E402
from muser.testing import check_all, null_engine, null_model_path  # noqa: E402

PROMPT = [270, 271, 272]
# Sampling options under which the null model never ends on its own: runs until cancelled.
ENDLESS = {"max_tokens": 5000, "temperature": 0.0,
           "logit_bias": {token: float("-inf") for token in null_engine(step_seconds=0.0).eog_ids}}


@pytest.fixture
def server():
    replica = MuserServer(str(null_model_path()), backend="null", slots=2, max_waiting=2,
                          engine_options={"null_step_seconds": 0.002})
    yield replica
    replica._executor.shutdown(wait=True)


def _wait_until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition()


def test_generate_stream_and_chat_match_the_local_api(server):
    local = null_engine(step_seconds=0.0)

    async def run():
        text = await server.generate(PROMPT, max_tokens=6, temperature=0)
        chunks = [c async for c in server.stream(PROMPT, max_tokens=6, temperature=0)]
        reply = await server.chat([{"role": "user", "content": "hi"}], max_tokens=4, temperature=0)
        return text, chunks, reply

    text, chunks, reply = asyncio.run(run())
    assert text == muser.generate(local, PROMPT, max_tokens=6, temperature=0)
    assert "".join(c.text for c in chunks) == text and chunks[-1].finish_reason in ("stop", "length")
    assert reply == muser.chat(local, [{"role": "user", "content": "hi"}], max_tokens=4, temperature=0)
    _wait_until(lambda: server.stats()["replica_requests"].get("completed") == 3)


def test_a_dropped_stream_cancels_its_request_and_frees_the_slot(server):
    async def run():
        stream = server.stream(PROMPT, **ENDLESS)
        await stream.__anext__()
        await stream.__anext__()
        await stream.aclose()  # what Ray Serve does when the caller drops the stream

    with server.engine.record_schedule() as log:
        asyncio.run(run())
        _wait_until(lambda: server.stats()["admission"]["in_use"] == 0)
    assert server.stats()["replica_requests"] == {"cancelled": 1}
    (request,) = log.requests
    assert request.outcome == "cancelled"
    check_all(log)


def test_a_cancelled_generate_cancels_its_request_and_frees_the_slot(server):
    async def run():
        task = asyncio.ensure_future(server.generate(PROMPT, **ENDLESS))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    _wait_until(lambda: server.stats()["admission"]["in_use"] == 0 and server.stats()["replica_requests"])
    assert server.stats()["replica_requests"] == {"cancelled": 1}


def test_the_health_check_fails_once_the_pool_latched_unhealthy(server):
    server.check_health()
    assert server.mark_unhealthy("operator drain") == server.replica_id
    with pytest.raises(muser.Unhealthy, match="latched unhealthy"):
        server.check_health()


def test_openai_shaped_calls_match_muser_openai(server):
    local = null_engine(step_seconds=0.0)
    messages = [{"role": "user", "content": "hi"}]

    async def run():
        reply = await server.create_chat_completion(messages, max_tokens=5, temperature=0)
        chunks = [c async for c in server.create_chat_completion_stream(messages, max_tokens=5, temperature=0)]
        completion = await server.create_completion("hello", max_tokens=5, temperature=0)
        pieces = [c async for c in server.create_completion_stream("hello", max_tokens=5, temperature=0)]
        return reply, chunks, completion, pieces

    reply, chunks, completion, pieces = asyncio.run(run())
    expected = muser.openai.create_chat_completion(local, messages, max_tokens=5, temperature=0)
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"] == expected["choices"][0]["message"]
    assert reply["usage"] == expected["usage"]
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert streamed == expected["choices"][0]["message"]["content"]
    text = muser.openai.create_completion(local, "hello", max_tokens=5, temperature=0)["choices"][0]["text"]
    assert completion["choices"][0]["text"] == text
    assert "".join(p["choices"][0]["text"] for p in pieces if p["choices"]) == text


def test_a_stream_keyword_is_refused_with_where_to_stream_instead(server):
    with pytest.raises(ValueError, match="create_chat_completion_stream through handle.options"):
        asyncio.run(server.create_chat_completion([{"role": "user", "content": "hi"}], stream=True))
