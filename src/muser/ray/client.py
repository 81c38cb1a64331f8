"""A thin caller-side wrapper around a muser deployment's ``DeploymentHandle``
that speaks muser's Python API and raises muser's typed errors.

Calling the handle directly works too (``handle.generate.remote(prompt,
max_tokens=32).result()``); the client adds:

- ``stream``/``astream``/``chat(stream=True)`` as plain (async) iterators of
  :class:`muser.GenerationChunk`, and the OpenAI-shaped
  ``create_chat_completion``/``create_completion`` (dicts, or iterators of
  chunk dicts with ``stream=True``); closing an iterator early cancels the
  request on its replica, which frees the slot;
- errors as muser types: Ray's ``BackPressureError`` (every replica full and
  the caller's queue at ``max_queued_requests``) becomes
  :class:`muser.Overloaded`; a replica that died under a request becomes
  :class:`ReplicaLost` (a :class:`muser.Unhealthy`); muser errors raised in
  the replica (``Cancelled``, ``ContextOverflow``, ``ValueError`` ...) come
  back as themselves.

Thread safety: a client may be shared between threads and event loops as
freely as its handle.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, cast

from ray import exceptions as ray_exceptions
from ray.serve.exceptions import BackPressureError

import muser

__all__ = ["Client", "ReplicaLost"]


class ReplicaLost(muser.Unhealthy):
    """The replica serving a request died (its process or node was lost).

    The request did not complete; a new request is routed to a live replica.
    """


def _translate(exc: BaseException) -> BaseException | None:
    """The muser error a Ray failure stands for, or None to re-raise it unchanged."""
    if isinstance(exc, BackPressureError):
        return muser.Overloaded(f"every replica is full and {exc.args[0] if exc.args else 'too many'} requests "
                                "are queued at this caller (max_queued_requests)")
    if isinstance(exc, ray_exceptions.RayTaskError):
        cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else None
        if cause is not None and not isinstance(cause, ray_exceptions.RayError):
            return _translate(cause) or cause
        return None
    if isinstance(exc, (ray_exceptions.ActorDiedError, ray_exceptions.ActorUnavailableError,
                        ray_exceptions.RayActorError)):
        return ReplicaLost(f"the replica serving this request was lost: {exc}")
    return None


class Client:
    """muser's generation API over a deployment handle (see the module docstring).

    Args:
        handle: the ``DeploymentHandle`` that ``serve.run(muser.ray.deployment(...))`` returned.
    """

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def _result(self, response: Any) -> Any:
        try:
            return response.result()
        except Exception as exc:
            translated = _translate(exc)
            if translated is None:
                raise
            raise translated from exc

    def generate(self, prompt: str | Sequence[int], **kwargs: Any) -> str | list[str]:
        """``muser.generate`` on a replica. Raises muser's errors (see the module docstring)."""
        return cast("str | list[str]", self._result(self.handle.generate.remote(prompt, **kwargs)))

    def chat(self, messages: Sequence[Mapping[str, Any]], *, stream: bool = False, **kwargs: Any) -> Any:
        """``muser.chat`` on a replica; ``stream=True`` gives an iterator of chunks."""
        if stream:
            return self._iterate(self.handle.options(stream=True).chat_stream.remote(messages, **kwargs))
        return self._result(self.handle.chat.remote(messages, **kwargs))

    def stream(self, prompt: str | Sequence[int], **kwargs: Any) -> Iterator[muser.GenerationChunk]:
        """``muser.stream`` on a replica. Closing the iterator early cancels the request there."""
        return self._iterate(self.handle.options(stream=True).stream.remote(prompt, **kwargs))

    def create_chat_completion(self, messages: Sequence[Mapping[str, Any]], *, stream: bool = False,
                               **kwargs: Any) -> Any:
        """``muser.openai.create_chat_completion`` on a replica: a ``chat.completion`` dict, or with
        ``stream=True`` an iterator of ``chat.completion.chunk`` dicts (closing it cancels the request)."""
        if stream:
            return self._iterate(self.handle.options(stream=True).create_chat_completion_stream.remote(messages,
                                                                                                       **kwargs))
        return self._result(self.handle.create_chat_completion.remote(messages, **kwargs))

    def create_completion(self, prompt: str | Sequence[int], *, stream: bool = False, **kwargs: Any) -> Any:
        """``muser.openai.create_completion`` on a replica (``stream=True``: an iterator of chunk dicts)."""
        if stream:
            return self._iterate(self.handle.options(stream=True).create_completion_stream.remote(prompt, **kwargs))
        return self._result(self.handle.create_completion.remote(prompt, **kwargs))

    def _iterate(self, responses: Any) -> Iterator[Any]:
        finished = False
        try:
            for chunk in responses:
                yield chunk
            finished = True
        except Exception as exc:  # not GeneratorExit/CancelledError: those cancel below
            finished = True
            translated = _translate(exc)
            if translated is None:
                raise
            raise translated from exc
        finally:
            if not finished:
                responses.cancel()

    async def agenerate(self, prompt: str | Sequence[int], **kwargs: Any) -> str | list[str]:
        """``await``-able :meth:`generate`; cancelling the awaiting task cancels the request."""
        response = self.handle.generate.remote(prompt, **kwargs)
        try:
            return cast("str | list[str]", await response)
        except Exception as exc:
            translated = _translate(exc)
            if translated is None:
                raise
            raise translated from exc

    async def astream(self, prompt: str | Sequence[int], **kwargs: Any) -> AsyncIterator[muser.GenerationChunk]:
        """``async for`` version of :meth:`stream`."""
        responses = self.handle.options(stream=True).stream.remote(prompt, **kwargs)
        finished = False
        try:
            async for chunk in responses:
                yield chunk
            finished = True
        except Exception as exc:  # not GeneratorExit/CancelledError: those cancel below
            finished = True
            translated = _translate(exc)
            if translated is None:
                raise
            raise translated from exc
        finally:
            if not finished:
                responses.cancel()
