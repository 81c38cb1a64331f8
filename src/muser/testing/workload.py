"""Workloads for scheduling tests: what requests arrive when, and a runner that
plays them against a pool from real threads through the public generation API.

:mod:`muser.testing.strategies` draws :class:`Workload` s with Hypothesis; a
test can also write one by hand.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from muser.errors import MuserError

if TYPE_CHECKING:
    from muser.engine import Engine
    from muser.pool import SlotPool

__all__ = ["RequestResult", "RequestSpec", "Workload", "prompt_tokens", "run_workload"]

# Token ids of the null model's letters and digits (muser.testing.null_model):
# prompts avoid control tokens so that every request is a plain text prompt.
_FIRST_TEXT_TOKEN, _TEXT_TOKENS = 262, 36


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload.

    Args:
        arrival_s: when it starts, seconds after the workload starts.
        prompt_tokens: prompt length in tokens.
        max_tokens: tokens to generate at most (the null model may stop earlier on an end token).
        kind: a label for the test's own assertions ("chat", "document", ...).
        prefix_group: requests of the same group (>= 0) share their first
            ``shared_prefix`` prompt tokens, so a slot's cached prefix can be reused.
        shared_prefix: how many leading tokens the group shares.
        cancel_after_tokens: the caller cancels after receiving this many chunks.
        stall_s: the consumer pauses this long after its first chunk.
        timeout_s: passed as ``timeout=`` (the deadline of the whole request).
    """

    arrival_s: float
    prompt_tokens: int
    max_tokens: int
    kind: str = "chat"
    prefix_group: int = -1
    shared_prefix: int = 0
    cancel_after_tokens: int | None = None
    stall_s: float = 0.0
    timeout_s: float | None = None


@dataclass(frozen=True)
class Workload:
    """Requests to play against one pool, in any order (each has its arrival time)."""

    requests: tuple[RequestSpec, ...]

    def __len__(self) -> int:
        return len(self.requests)


@dataclass
class RequestResult:
    """How one request of a workload ended.

    ``finish_reason`` is the last chunk's (``"stop"``, ``"length"``,
    ``"cancelled"``) or ``None`` when it raised; ``error`` is then the
    exception. ``first_token_s`` and ``ended_s`` are seconds after the
    workload started.
    """

    index: int
    spec: RequestSpec
    tokens: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    error: BaseException | None = None
    first_token_s: float | None = None
    ended_s: float | None = None


def prompt_tokens(index: int, spec: RequestSpec) -> list[int]:
    """The prompt of request ``index``: deterministic text tokens of the null model.

    Requests of one ``prefix_group`` share their first ``shared_prefix`` tokens.
    """
    shared = spec.shared_prefix if spec.prefix_group >= 0 else 0
    shared = min(shared, spec.prompt_tokens)
    prefix = [_FIRST_TEXT_TOKEN + (spec.prefix_group * 7 + k) % _TEXT_TOKENS for k in range(shared)]
    rest = [_FIRST_TEXT_TOKEN + (index * 13 + k * 5 + 1) % _TEXT_TOKENS for k in range(spec.prompt_tokens - shared)]
    return prefix + rest


def run_workload(pool: SlotPool | Engine, workload: Workload | Sequence[RequestSpec], *, seed: int = 0,
                 join_timeout: float = 120.0, **generation_options: Any) -> list[RequestResult]:
    """Play ``workload`` against ``pool`` (a :class:`muser.SlotPool` or an engine):
    each request is ``muser.stream`` on its own thread, started at its arrival time.

    Errors of individual requests (``Overloaded``, ``TimeoutError``,
    ``Cancelled``, ...) are captured in their :class:`RequestResult`, never
    raised. ``generation_options`` are passed to every ``muser.stream`` call
    (``temperature=0`` by default).

    Raises:
        AssertionError: a request thread was still running after ``join_timeout`` seconds.
    """
    import muser
    from muser.pool import CancelToken

    specs = list(workload.requests if isinstance(workload, Workload) else workload)
    options = {"temperature": 0.0, **generation_options}
    results = [RequestResult(i, spec) for i, spec in enumerate(specs)]
    started = time.monotonic()

    def run(result: RequestResult) -> None:
        spec = result.spec
        delay = started + spec.arrival_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        cancel = CancelToken()
        try:
            chunks = muser.stream(pool, prompt_tokens(result.index, spec), max_tokens=spec.max_tokens,
                                  seed=seed + result.index, timeout=spec.timeout_s, cancel=cancel, **options)
            received = 0
            for chunk in chunks:
                received += 1
                if result.first_token_s is None:
                    result.first_token_s = time.monotonic() - started
                    if spec.stall_s:
                        time.sleep(spec.stall_s)
                result.tokens.extend(chunk.token_ids)
                if chunk.finish_reason is not None:
                    result.finish_reason = chunk.finish_reason
                if spec.cancel_after_tokens is not None and received >= spec.cancel_after_tokens:
                    cancel.cancel()
        except (MuserError, TimeoutError, ValueError) as exc:
            result.error = exc
        finally:
            result.ended_s = time.monotonic() - started

    threads = [threading.Thread(target=run, args=(r,), name=f"workload-{r.index}", daemon=True) for r in results]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + join_timeout
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    if hung:
        raise AssertionError(f"requests still running after {join_timeout:g} s: {', '.join(hung)}")
    return results
