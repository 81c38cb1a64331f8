"""The Ray Serve deployment: one muser Engine and one SlotPool per replica.

Methods mirror muser's Python API (``generate``, ``stream``, ``chat``,
``chat_stream``, and the OpenAI-shaped ``create_chat_completion`` and
``create_completion`` of :mod:`muser.openai`) and take the same keyword
arguments; the ``*_stream`` methods and ``stream`` are streaming methods
(call them through ``handle.options(stream=True)``) that yield
:class:`muser.GenerationChunk` s, or OpenAI-shaped chunk dicts.

Admission: Ray Serve sends a replica at most ``max_ongoing_requests`` =
slots + max_waiting requests, exactly what its pool admits (slots running,
the rest waiting inside the pool); each caller holds at most
``max_queued_requests`` more, then gets Ray's ``BackPressureError``
(:class:`muser.ray.Client` raises it as :class:`muser.Overloaded`).

Cancellation: cancelling a response (``response.cancel()``), or dropping a
stream, cancels the request inside the replica, which frees its slot.

Health: ``check_health`` fails once the pool latched unhealthy (a lease
ended in an unknown state, or :meth:`MuserServer.mark_unhealthy`), so Ray
Serve replaces the replica.

Thread safety: Ray Serve runs these async methods on the replica's event
loop; generation runs on the replica's own thread pool (one thread per
request it can hold), never blocking the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import muser
from muser.ray.stats import report_stats

__all__ = ["MuserServer"]

_DONE = object()


class MuserServer:
    """One replica: an Engine and a SlotPool (see the module docstring).

    Args:
        model: a GGUF path or a registry key (``"smollm2-135m"``), fetched if needed.
        backend, threads: as :class:`muser.Engine`.
        slots, max_waiting, max_context: as :class:`muser.SlotPool`.
        engine_options: more keyword arguments for :class:`muser.Engine`.
        stats_name: the name of the stats board this replica reports to
            (set by :func:`muser.ray.deployment`; ``None``: no reports).
    """

    def __init__(self, model: str, *, backend: str = "auto", threads: int | None = None, slots: int = 4,
                 max_waiting: int = 4, max_context: int | None = None,
                 engine_options: dict[str, Any] | None = None, stats_name: str | None = None) -> None:
        from ray import serve

        path = model if os.path.exists(model) else muser.models.fetch(model)
        self.engine = muser.Engine(path, threads=threads, backend=backend, **(engine_options or {}))
        self.pool = muser.SlotPool(self.engine, slots=slots, max_waiting=max_waiting, max_context=max_context)
        # One thread per request the replica may hold (running or waiting in the pool).
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=slots + max_waiting,
                                                                thread_name_prefix="muser-replica")
        try:
            self.replica_id = serve.get_replica_context().replica_id.to_full_id_str()
        except Exception:  # constructed outside Serve (tests of the class itself)
            self.replica_id = f"local-{os.getpid()}"
        self._stats_name = stats_name
        # How requests on this replica ended: completed / cancelled / failed.
        self._outcomes: Counter[str] = Counter()
        self._outcomes_lock = threading.Lock()
        self._report()
        if stats_name is not None:
            # Requests end on their own threads after the calls above return
            # (a cancelled stream's producer, a slot's release): a light poll
            # posts what changed, so the board always catches up.
            threading.Thread(target=self._post_changes, name="muser-replica-stats", daemon=True).start()

    def _post_changes(self, period_s: float = 0.5) -> None:
        posted: dict[str, Any] | None = None
        while True:
            time.sleep(period_s)
            stats = self.stats()
            if stats != posted and self._stats_name is not None:
                report_stats(self._stats_name, self.replica_id, stats)
                posted = stats

    def _ended(self, outcome: str) -> None:
        with self._outcomes_lock:
            self._outcomes[outcome] += 1
        self._report()

    # -- generation -----------------------------------------------------------

    async def _run(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking muser call on the replica's threads; a cancelled
        caller cancels the request (its slot is freed) instead of leaving it running."""
        token = muser.CancelToken()
        future = self._executor.submit(call, self.pool, *args, cancel=token, **kwargs)
        self._report()

        def ended(done: concurrent.futures.Future[Any]) -> None:
            if done.cancelled():  # cancelled before a thread picked it up: it never ran
                self._ended("cancelled")
                return
            error = done.exception()
            self._ended("completed" if error is None else "cancelled" if token.cancelled else "failed")

        future.add_done_callback(ended)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            token.cancel()
            raise

    async def _chunks(self, start: Callable[..., Any], *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        token = muser.CancelToken()
        # Starting tokenizes the prompt: on a pool thread, not the event loop.
        started = self._executor.submit(start, self.pool, *args, cancel=token, **kwargs)
        pending: concurrent.futures.Future[Any] = started
        iterator = None
        outcome = "cancelled"  # unless the stream runs to its end or fails
        try:
            iterator = await asyncio.wrap_future(started)
            first = True
            while True:
                pending = self._executor.submit(next, iterator, _DONE)
                chunk = await asyncio.wrap_future(pending)
                if chunk is _DONE:
                    outcome = "completed"
                    return
                if first:  # it holds a slot now: post that
                    first = False
                    self._report()
                yield chunk
        except Exception:
            outcome = "failed"
            raise
        finally:
            # Reached when the stream ends, fails, or the caller cancels or
            # drops it (Ray cancels this generator). The token ends the request
            # at its next step; the iterator is closed on a pool thread once
            # the call in flight (starting it, or one step) has returned.
            token.cancel()

            def close(_: Any = None) -> None:
                try:
                    stream = iterator if iterator is not None else started.result()
                except BaseException:  # it never started: nothing to close
                    stream = None
                if stream is not None:
                    stream.close()
                self._ended(outcome)

            pending.add_done_callback(close)

    async def generate(self, prompt: Any, **kwargs: Any) -> str | list[str]:
        """``muser.generate`` on this replica's pool (``n`` completions up to its slots)."""
        return cast("str | list[str]", await self._run(muser.generate, prompt, **kwargs))

    async def stream(self, prompt: Any, **kwargs: Any) -> AsyncIterator[muser.GenerationChunk]:
        """``muser.stream`` on this replica's pool; call with ``handle.options(stream=True)``."""
        async for chunk in self._chunks(muser.stream, prompt, **kwargs):
            yield chunk

    async def chat(self, messages: Any, **kwargs: Any) -> str | list[str]:
        """``muser.chat`` on this replica's pool."""
        return cast("str | list[str]", await self._run(muser.chat, messages, **kwargs))

    async def chat_stream(self, messages: Any, **kwargs: Any) -> AsyncIterator[muser.GenerationChunk]:
        """``muser.chat(..., stream=True)`` on this replica's pool; call with ``handle.options(stream=True)``."""
        async for chunk in self._chunks(_chat_stream, messages, **kwargs):
            yield chunk

    async def create_chat_completion(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        """``muser.openai.create_chat_completion``: a ``chat.completion`` dict.
        For ``stream=True`` call ``create_chat_completion_stream`` instead."""
        _refuse_stream(kwargs, "create_chat_completion_stream")
        return cast("dict[str, Any]", await self._run(muser.openai.create_chat_completion, messages, **kwargs))

    async def create_chat_completion_stream(self, messages: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        """``chat.completion.chunk`` dicts; call with ``handle.options(stream=True)``."""
        _refuse_stream(kwargs, "create_chat_completion_stream")
        async for chunk in self._chunks(_streaming(muser.openai.create_chat_completion), messages, **kwargs):
            yield chunk

    async def create_completion(self, prompt: Any, **kwargs: Any) -> dict[str, Any]:
        """``muser.openai.create_completion``: a ``text_completion`` dict.
        For ``stream=True`` call ``create_completion_stream`` instead."""
        _refuse_stream(kwargs, "create_completion_stream")
        return cast("dict[str, Any]", await self._run(muser.openai.create_completion, prompt, **kwargs))

    async def create_completion_stream(self, prompt: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        """``text_completion`` chunk dicts; call with ``handle.options(stream=True)``."""
        _refuse_stream(kwargs, "create_completion_stream")
        async for chunk in self._chunks(_streaming(muser.openai.create_completion), prompt, **kwargs):
            yield chunk

    # -- operations -------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """This replica's id, how its requests ended (``replica_requests``:
        completed / cancelled / failed, as seen at the Ray boundary) and its
        pool's telemetry (``SlotPool.stats()``, whose own ``requests`` counts
        the pool's view)."""
        with self._outcomes_lock:
            outcomes = dict(self._outcomes)
        return {"replica": self.replica_id, "pid": os.getpid(), **self.pool.stats(), "replica_requests": outcomes}

    def mark_unhealthy(self, reason: str = "marked unhealthy by an operator") -> str:
        """Latch this replica's pool unhealthy: its health check fails and Ray
        Serve replaces it. Returns this replica's id."""
        self.pool._core.mark_unhealthy(reason)
        self._report()
        return self.replica_id

    def check_health(self) -> None:
        """Ray Serve's health check: raises once the pool latched unhealthy."""
        if not self.pool.healthy:
            raise muser.Unhealthy(f"replica {self.replica_id}: the slot pool latched unhealthy")

    def _report(self) -> None:
        if self._stats_name is not None:
            report_stats(self._stats_name, self.replica_id, self.stats())


def _chat_stream(pool: Any, messages: Any, **kwargs: Any) -> Any:
    return muser.chat(pool, messages, stream=True, **kwargs)


def _streaming(create: Callable[..., Any]) -> Callable[..., Any]:
    return lambda pool, request, **kwargs: create(pool, request, stream=True, **kwargs)


def _refuse_stream(kwargs: dict[str, Any], streaming_method: str) -> None:
    # Ray Serve decides at call time whether a method streams, so the choice
    # is the method, not a keyword.
    if "stream" in kwargs:
        raise ValueError(f"pass no stream= here: call {streaming_method} through handle.options(stream=True) "
                         "to stream (muser.ray.Client does this for stream=True)")
