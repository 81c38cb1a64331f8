"""Text generation: ``generate``, ``stream``, ``astream`` and ``chat``.

Each request runs in its own producer thread: tokenize, acquire a slot of the
pool, prefill what the slot does not already hold, then per token sample,
check the grammar, detokenize, match stop strings and decode. Tokenization,
sampling, grammar and detokenization never run while the accelerator is held
(the compiled core holds it only inside a forward).

Output goes through a bounded channel of 64 chunks (``generate`` collects
without one). A consumer that leaves it full is let be while nobody waits
for a slot: the producer pauses, holding its slot but no compute (a notebook
stepping through, a debugger). Once someone waits for a slot and the channel
has stayed full for ``consumer_timeout`` seconds (5 by default), the request
is cancelled with :class:`muser.Cancelled` and the slot freed: a slow
consumer never holds a slot hostage. ``astream`` hands chunks to the event
loop directly (``call_soon_threadsafe``), so it needs no executor threads.

``timeout`` is the deadline of the whole request (tokenizing the prompt,
waiting for a slot, prefill, generation): past it the request ends with
:class:`muser.DeadlineExceeded` and frees its slot.

Lifecycle: closing a stream (or dropping it), Ctrl-C in ``generate``,
``SlotPool.close()``/``Engine.close()`` and interpreter exit cancel the
request and let its thread end; at exit the threads are joined before the
interpreter tears down, so no thread of ours runs into finalization.

Thread safety: call these from any number of threads at once; they share the
pool safely. A stream iterator belongs to the thread iterating it.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import itertools
import math
import queue
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, TypeGuard, Union, cast, overload

import numpy as np

from muser import limits
from muser.chat_template import ChatTemplate, ChatTemplateError
from muser.engine import Engine
from muser.errors import Cancelled, DeadlineExceeded, InternalError
from muser.grammar import Grammar
from muser.logits_hooks import RequestHooks
from muser.options import (
    GENERATION_KEYWORDS,
    SAMPLING_KEYWORDS,
    GenerationOptions,
    LogitsProcessor,
    StoppingCriterion,
    check_keywords,
    explicit_signature,
)
from muser.pool import CancelToken, Slot, SlotPool
from muser.sampling import SamplerChain, SamplingParams, make_sampler
from muser.text.detokenizer import StreamingDetokenizer
from muser.text.stops import StopMatcher
from muser.types import GenerationChunk, GenerationTimings, TokenLogprob

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from typing import Unpack
    else:
        from typing_extensions import Unpack

__all__ = ["astream", "chat", "generate", "stream", "CHANNEL_DEPTH", "CONSUMER_TIMEOUT_S"]

CHANNEL_DEPTH = 64
CONSUMER_TIMEOUT_S = 5.0
PREFILL_PIECE = 512  # prompt tokens per prefill call: the cancellation granularity

Target = Union[SlotPool, Engine]
_END = object()
_REQUEST_IDS = itertools.count(1)  # labels requests in schedule recordings (muser.testing)
_STALL_POLL_S = 0.05  # how often a producer facing a full channel looks at cancellation and waiters
_EXIT_JOIN_S = 30.0   # at interpreter exit, how long in all to wait for producer threads

# Every request whose producer thread is running, for the exit hook.
_live_lock = threading.Lock()
_live: set[_Request] = set()


@dataclass
class _Options:
    max_tokens: int
    stop: tuple[str, ...]
    stop_token_ids: tuple[int, ...]
    seed: int | None
    grammar: Grammar | None
    logprobs: bool
    top_logprobs: int
    echo: bool
    context_shift: bool
    n_keep: int
    timeout: float | None
    consumer_timeout: float | None
    params: SamplingParams
    special: bool
    logits_processors: tuple[LogitsProcessor, ...]
    stopping_criteria: tuple[StoppingCriterion, ...]


def _pool_of(target: Target) -> SlotPool:
    if isinstance(target, SlotPool):
        return target
    if isinstance(target, Engine):
        return target.default_pool()
    raise TypeError(f"expected a muser.SlotPool or muser.Engine, got {type(target).__name__}")


def _options(function: str, kwargs: Mapping[str, Any], own: Sequence[str] = ()) -> _Options:
    """Validate the keywords of a public call (a misspelt one names the closest
    valid one, the function's ``own`` parameters included)."""
    check_keywords(function, kwargs, _OPTION_KEYWORDS | set(own))
    return _make_options(**kwargs)


_OPTION_KEYWORDS = (GENERATION_KEYWORDS | SAMPLING_KEYWORDS) - {"cancel", "parse_special"}


def _make_options(
    max_tokens: int = 256,
    stop: str | Sequence[str] = (),
    stop_token_ids: Sequence[int] = (),
    seed: int | None = None,
    grammar: Grammar | None = None,
    logprobs: bool = False,
    top_logprobs: int = 0,
    echo: bool = False,
    context_shift: bool = False,
    n_keep: int = 0,
    timeout: float | None = None,
    consumer_timeout: float | None = CONSUMER_TIMEOUT_S,
    special: bool = False,
    logits_processors: Sequence[LogitsProcessor] | None = None,
    stopping_criteria: Sequence[StoppingCriterion] | None = None,
    **sampling: Any,
) -> _Options:
    max_tokens = limits.check_int("max_tokens", max_tokens, 1)
    top_logprobs = limits.check_int("top_logprobs", top_logprobs, 0)
    consumer_wait = limits.check_timeout("consumer_timeout", consumer_timeout)
    if consumer_wait == 0:
        raise ValueError("consumer_timeout must be > 0 seconds (or None: never cancel a slow consumer)")
    if grammar is not None and not isinstance(grammar, Grammar):
        raise TypeError(f"grammar must be a muser.Grammar, got {type(grammar).__name__}")
    processors = tuple(logits_processors or ())
    criteria = tuple(stopping_criteria or ())
    for name, hooks in (("logits_processors", processors), ("stopping_criteria", criteria)):
        for index, hook in enumerate(hooks):
            if not callable(hook):
                raise TypeError(f"{name}[{index}] must be callable as fn(token_ids, logits), "
                                f"got {type(hook).__name__}")
    return _Options(
        max_tokens=max_tokens, stop=limits.check_sequence_of_str("stop", stop),
        stop_token_ids=tuple(limits.check_token_ids("stop_token_ids", stop_token_ids)), seed=seed,
        grammar=grammar, logprobs=logprobs, top_logprobs=top_logprobs, echo=echo,
        context_shift=context_shift, n_keep=limits.check_int("n_keep", n_keep, 0),
        timeout=limits.check_timeout("timeout", timeout),
        consumer_timeout=consumer_wait, params=SamplingParams(**sampling), special=special,
        logits_processors=processors, stopping_criteria=criteria,
    )


def _deadline(timeout: float | None, since: float | None = None) -> float | None:
    """The ``time.monotonic()`` instant a request with ``timeout``, started at
    ``since`` (default: now), must end by; None: no deadline."""
    if timeout is None or not math.isfinite(timeout):  # None or inf: no deadline
        return None
    return (time.monotonic() if since is None else since) + timeout


def _deadline_error(timeout: float | None, during: str = "") -> DeadlineExceeded:
    return DeadlineExceeded(f"the request ran past its timeout of {timeout:g} s{during}")


def _prompt_tokens(engine: Engine, prompt: str | Sequence[int], parse_special: bool,
                   cancel: CancelToken | None = None, deadline: float | None = None,
                   timeout: float | None = None) -> list[int]:
    """The prompt's token ids. A text is tokenized under the request's
    cancellation and deadline (a 16 Mi-character prompt takes seconds, and is
    part of the request): Cancelled or DeadlineExceeded, as the request
    itself would end, the moment either applies."""
    checked = limits.check_prompt(prompt, engine.n_vocab)
    if cancel is not None and not isinstance(cancel, CancelToken):
        raise TypeError(f"cancel must be a muser.CancelToken or None, got {type(cancel).__name__}")
    if isinstance(checked, str):
        watch = CancelToken(cancel)
        if deadline is not None:
            watch.set_deadline(max(0.0, deadline - time.monotonic()))
        try:
            tokens = engine.tokenize(checked, add_special=True, parse_special=parse_special, cancel=watch)
        except Cancelled as exc:
            if watch.deadline_passed:
                raise _deadline_error(timeout, " (while tokenizing the prompt)") from exc
            raise Cancelled("the request was cancelled while tokenizing its prompt") from exc
    else:
        tokens = checked
    if not tokens:
        raise ValueError("the prompt is empty (no tokens to condition on)")
    return tokens


class _Channel:
    """A bounded hand-off of chunks from one producer thread to one consumer.

    ``depth`` credits bound the chunks in flight: the producer takes one per
    chunk (waiting while none is free), the consumer gives it back when it
    takes the chunk. Chunks go into a plain queue, or, with ``loop``,
    straight into an ``asyncio.Queue`` on that loop (``call_soon_threadsafe``),
    so an async consumer needs no executor thread. The end marker takes no
    credit: ending never blocks.
    """

    def __init__(self, depth: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._credits = threading.Semaphore(depth)
        self._loop = loop
        self._queue: Any = queue.SimpleQueue() if loop is None else asyncio.Queue(maxsize=depth + 1)

    def offer(self, item: Any, timeout: float) -> bool:
        """Deliver ``item`` if a place frees up within ``timeout`` seconds.

        Raises:
            RuntimeError: the consumer's event loop is closed.
        """
        if not self._credits.acquire(timeout=timeout):
            return False
        self._deliver(item)
        return True

    def end(self) -> None:
        try:
            self._deliver(_END)
        except RuntimeError:  # the event loop is gone, and with it the consumer
            pass

    def _deliver(self, item: Any) -> None:
        if self._loop is None:
            self._queue.put(item)
        else:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _taken(self, item: Any) -> Any:
        if item is not _END:
            self._credits.release()
        return item

    def get(self) -> Any:
        return self._taken(self._queue.get())

    async def aget(self) -> Any:
        return self._taken(await self._queue.get())

    def drain(self) -> None:
        """Drop what is queued (consumer side), freeing the producer."""
        try:
            while True:
                self._taken(self._queue.get_nowait())
        except (queue.Empty, asyncio.QueueEmpty):
            pass


class _Request:
    """One completion, produced on its own thread into a channel (or, for
    ``generate``, into a list: the caller waits for the whole text anyway)."""

    def __init__(self, pool: SlotPool, tokens: list[int], options: _Options, seed: int | None,
                 index: int, user_cancel: CancelToken | None, *, collect: bool = False,
                 loop: asyncio.AbstractEventLoop | None = None, deadline: float | None = None) -> None:
        self.pool = pool
        self.engine = pool.engine
        self.tokens = tokens
        self.options = options
        self.seed = seed
        self.index = index
        # The caller's token (shared by all n completions of a call) is the
        # parent of this request's own token: cancelling the caller's stops
        # it, and so do the consumer going away, shutdown and the deadline,
        # without touching the caller's token. The core watches ours.
        self.user_cancel = user_cancel
        self.cancel = CancelToken(user_cancel)
        # The deadline counts from the call (tokenizing the prompt is part of
        # the request), not from when this producer was built.
        if deadline is None:
            deadline = _deadline(options.timeout)
        if deadline is not None:
            self.cancel.set_deadline(max(0.0, deadline - time.monotonic()))
        self.collected: list[GenerationChunk] | None = [] if collect else None
        self.channel = None if collect else _Channel(CHANNEL_DEPTH, loop)
        self.error: BaseException | None = None
        self.stalled = False
        self.finish_reason: str | None = None
        self.sampling_ns = 0
        self.request_id = next(_REQUEST_IDS)
        self.recorder = pool.engine._core.schedule_recorder
        self.thread = threading.Thread(target=self._run, name=f"muser-request-{index}", daemon=True)

    def start(self) -> _Request:
        with _live_lock:
            _live.add(self)
        self.pool._add_request(self)
        try:
            self.thread.start()
        except BaseException:
            with _live_lock:
                _live.discard(self)
            raise
        return self

    # -- producer side -----------------------------------------------------

    def _note(self, what: str, slot: int = -1, detail: str = "") -> None:
        # Schedule recording (engine.record_schedule()): one attribute read when off.
        if self.recorder.recording:
            self.recorder.note(what, self.request_id, self.pool._core.id, slot, detail)

    def _deadline_error(self) -> DeadlineExceeded:
        return _deadline_error(self.options.timeout)

    def _emit(self, chunk: GenerationChunk) -> None:
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if self.collected is not None:
            self.collected.append(chunk)
            return
        channel = cast(_Channel, self.channel)  # no list to collect into: a channel
        stalled_since = None
        while True:
            try:
                if channel.offer(chunk, timeout=_STALL_POLL_S):
                    return
            except RuntimeError:
                raise Cancelled("the event loop consuming the stream was closed") from None
            if self.cancel.deadline_passed:
                raise self._deadline_error()
            if self.cancel.cancelled:
                raise Cancelled("the request was cancelled while its consumer was not reading")
            now = time.monotonic()
            if stalled_since is None:
                stalled_since = now
            elif (self.options.consumer_timeout is not None and now - stalled_since >= self.options.consumer_timeout
                  and self.pool._core.waiting > 0):
                # Only now does the stall cost anyone anything: a request waits for a slot.
                self.stalled = True
                raise Cancelled(
                    f"the consumer left the output channel full for {self.options.consumer_timeout:g} s "
                    "while another request waited for a slot"
                )

    def _run(self) -> None:
        self._note("request_started")
        outcome = "failed"
        try:
            self._generate()
            outcome = "cancelled" if self.finish_reason == "cancelled" else "finished"
        except DeadlineExceeded as exc:
            self.error, outcome = exc, "deadline_exceeded"
        except (Cancelled, TimeoutError) as exc:
            if self.cancel.deadline_passed:
                self.error, outcome = self._deadline_error(), "deadline_exceeded"
                self.error.__cause__ = exc
            elif isinstance(exc, Cancelled):
                outcome = "cancelled"
                if self.stalled or not self.cancel.cancelled:
                    self.error = exc
                else:  # cancelled by the caller, the consumer or shutdown: an ordinary end
                    self._deliver_cancelled(exc)
            else:
                self.error = exc
        except BaseException as exc:  # handed to the consumer, re-raised there
            self.error = exc
        finally:
            try:
                self._note("request_ended",
                           detail=type(self.error).__name__ if self.error else str(self.finish_reason))
                self.pool._record_outcome(outcome, self.sampling_ns)
                if self.channel is not None:
                    self.channel.end()  # never blocks: the consumer drains or is gone
            finally:
                with _live_lock:
                    _live.discard(self)

    def _deliver_cancelled(self, exc: Cancelled) -> None:
        self.finish_reason = "cancelled"
        chunk = GenerationChunk("", finish_reason="cancelled", index=self.index)
        if self.collected is not None:
            self.collected.append(chunk)
            return
        try:
            delivered = cast(_Channel, self.channel).offer(chunk, timeout=0)
        except RuntimeError:
            delivered = False
        if not delivered:
            self.error = exc

    def _logprob_fields(self, logits: np.ndarray, token: int) -> tuple[
            tuple[float, ...] | None, tuple[tuple[TokenLogprob, ...], ...] | None]:
        if not (self.options.logprobs or self.options.top_logprobs):
            return None, None
        shifted = logits.astype(np.float64) - float(np.max(logits))
        log_z = math.log(float(np.exp(shifted).sum()))
        chosen = float(shifted[token] - log_z)
        top = None
        if self.options.top_logprobs:
            k = min(self.options.top_logprobs, shifted.size)
            ids = np.argpartition(-shifted, k - 1)[:k]
            ids = ids[np.argsort(-shifted[ids], kind="stable")]
            top = (tuple(TokenLogprob(int(i), float(shifted[i] - log_z),
                                      self.engine.detokenize([int(i)])) for i in ids),)
        return (chosen,), top

    def _generate(self) -> None:
        options, engine = self.options, self.engine
        started = time.perf_counter()
        token_bytes, token_types = engine.vocabulary()
        constraint = None
        if options.grammar is not None:
            constraint = options.grammar.constraint(token_bytes, engine.eog_ids)
        chain = make_sampler(options.params, self.seed, grammar=constraint, vocab=engine,
                             context_size=self.pool.max_context)
        with self.pool.acquire(self.tokens, cancel=self.cancel) as slot:
            self._note("request_admitted", slot.index)
            queued = time.perf_counter()
            rest = self.tokens[slot.reused_tokens:]
            for at in range(0, len(rest), PREFILL_PIECE):
                slot.prefill(rest[at:at + PREFILL_PIECE])
            prefilled = time.perf_counter()
            chain.accept_prompt(self.tokens)
            detok = StreamingDetokenizer(token_bytes, token_types, engine.tokenizer.add_space_prefix,
                                         special=options.special, at_sequence_start=False)
            stops = StopMatcher(options.stop, stop_token_ids=options.stop_token_ids,
                                end_of_generation_ids=engine.eog_ids)

            def timings(generated: int) -> GenerationTimings:
                return GenerationTimings(
                    prompt_tokens=len(rest), prompt_ms=(prefilled - queued) * 1e3, generated_tokens=generated,
                    generation_ms=(time.perf_counter() - prefilled) * 1e3, queue_ms=(queued - started) * 1e3)

            if options.echo:
                self._emit(GenerationChunk(engine.detokenize(self.tokens), index=self.index, timings=timings(0)))
            self._decode_loop(slot, chain, detok, stops, timings)

    def _decode_loop(self, slot: Slot, chain: SamplerChain, detok: StreamingDetokenizer, stops: StopMatcher,
                     timings: Callable[[int], GenerationTimings]) -> None:
        options = self.options
        hooks = None
        if options.logits_processors or options.stopping_criteria:
            hooks = RequestHooks(options.logits_processors, options.stopping_criteria, self.tokens,
                                 options.max_tokens)
        for step in range(options.max_tokens):
            if self.cancel.deadline_passed:
                raise self._deadline_error()
            if self.cancel.cancelled:
                self._emit(GenerationChunk(stops.flush(), finish_reason="cancelled", index=self.index,
                                           timings=timings(step)))
                return
            logits = slot.logits
            if logits is None:  # a prefilled slot always has logits
                raise InternalError("the slot has no logits after prefill")
            sampling_started = time.perf_counter_ns()
            if hooks is not None:
                logits = hooks.process(logits)
            token = chain.sample(logits)
            chain.accept(token)
            logprob, top = self._logprob_fields(logits, token)
            self.sampling_ns += time.perf_counter_ns() - sampling_started
            if stops.is_stop_token(token):
                self._emit(GenerationChunk(_drain(detok, stops), (token,), logprob, top, finish_reason="stop",
                                           index=self.index, timings=timings(step + 1)))
                return
            check = stops.push(detok.push(token))
            if check.stopped:
                self._emit(GenerationChunk(check.text, (token,), logprob, top, finish_reason="stop",
                                           stop_string=check.stop_string, index=self.index,
                                           timings=timings(step + 1)))
                return
            if hooks is not None and hooks.append_and_check(token, logits):
                tail = check.text + _drain(detok, stops)
                self._emit(GenerationChunk(tail, (token,), logprob, top, finish_reason="stop",
                                           index=self.index, timings=timings(step + 1)))
                return
            if step + 1 == options.max_tokens:
                tail = check.text + _drain(detok, stops)
                self._emit(GenerationChunk(tail, (token,), logprob, top, finish_reason="length",
                                           index=self.index, timings=timings(step + 1)))
                return
            self._emit(GenerationChunk(check.text, (token,), logprob, top, index=self.index))
            if slot.n_past >= slot.max_context:
                if not options.context_shift:
                    tail = _drain(detok, stops)
                    self._emit(GenerationChunk(tail, finish_reason="length", index=self.index,
                                               timings=timings(step + 1)))
                    return
                slot.context_shift(min(options.n_keep, slot.n_past))
            slot.decode(token)

    # -- consumer side -----------------------------------------------------

    def abandon(self) -> None:
        """The consumer is gone: cancel and let the producer finish unblocked."""
        self.cancel.cancel()
        if self.channel is not None and self.channel._loop is None:
            self.channel.drain()


def _shutdown(requests: Sequence[_Request], timeout: float) -> None:
    """Cancel ``requests`` and wait up to ``timeout`` seconds in all for their threads."""
    for request in requests:
        request.cancel.cancel()
    give_up_at = time.monotonic() + timeout
    for request in requests:
        if request.thread is not threading.current_thread():
            request.thread.join(max(0.0, give_up_at - time.monotonic()))


@atexit.register
def _shutdown_at_exit() -> None:
    # Runs before the interpreter finalizes: a producer thread still inside
    # the core then would come back to a dying interpreter.
    with _live_lock:
        requests = list(_live)
    _shutdown(requests, _EXIT_JOIN_S)


def _drain(detok: StreamingDetokenizer, stops: StopMatcher) -> str:
    """The text still held back when generation ends for a reason other than a stop string."""
    check = stops.push(detok.flush())
    return check.text if check.stopped else check.text + stops.flush()


def _start(target: Target, prompt: str | Sequence[int], n: int, cancel: CancelToken | None,
           parse_special: bool, options: _Options, *, collect: bool = False,
           loop: asyncio.AbstractEventLoop | None = None, started_at: float | None = None) -> list[_Request]:
    """Validate, tokenize (under the request's cancellation and deadline,
    counted from ``started_at``, a ``time.monotonic()`` instant, or now) and
    start ``n`` producers."""
    pool = _pool_of(target)
    n = limits.check_int("n", n, 1, pool.slots)
    seed = limits.check_seed(options.seed, n)
    limits.check_n_keep(options.n_keep, pool.max_context, options.context_shift)
    deadline = _deadline(options.timeout, started_at)
    tokens = _prompt_tokens(pool.engine, prompt, parse_special, cancel, deadline, options.timeout)
    if len(tokens) >= pool.max_context:
        raise ValueError(f"the prompt has {len(tokens)} tokens; the pool's max_context is {pool.max_context}")
    seeds = [None if seed is None else seed + i for i in range(n)]
    # All built first, then started back to back, so the n completions
    # arrive at admission together.
    requests = [_Request(pool, tokens, options, seeds[i], i, cancel, collect=collect, loop=loop, deadline=deadline)
                for i in range(n)]
    started: list[_Request] = []
    try:
        for request in requests:
            started.append(request.start())
    except BaseException:
        _shutdown(started, _EXIT_JOIN_S)
        raise
    return requests


class _Stream(Iterator[GenerationChunk]):
    """What :func:`stream` returns: an iterator of chunks that is also a
    context manager. ``close()`` (also on leaving ``with``, on an exception
    while waiting such as Ctrl-C, and when the iterator is dropped) cancels
    the request, which then frees its slot within a step."""

    __slots__ = ("_request", "_finished")

    def __init__(self, request: _Request) -> None:
        self._request = request
        self._finished = False

    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> GenerationChunk:
        if self._finished:
            raise StopIteration
        try:
            item = cast(_Channel, self._request.channel).get()
        except BaseException:
            self.close()
            raise
        if item is _END:
            self._finished = True
            if self._request.error is not None:
                raise self._request.error
            raise StopIteration
        return cast(GenerationChunk, item)

    def close(self) -> None:
        if not self._finished:
            self._finished = True
            self._request.abandon()

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


Prompt = Union[str, Sequence[int]]
Prompts = Union[Sequence[str], Sequence[Sequence[int]]]


def _is_prompt_list(prompt: object) -> TypeGuard[Prompts]:
    """A list of prompts (texts or token lists), as opposed to one prompt (a text or token ids)."""
    if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence) or not prompt:
        return False
    return all(isinstance(p, str) or (isinstance(p, Sequence) and not isinstance(p, bytes)) for p in prompt)


def _refuse_prompt_list(function: str, prompt: object) -> None:
    if _is_prompt_list(prompt):
        raise TypeError(
            f"{function}() takes one prompt (a string or a list of token ids), got a list of "
            f"{len(prompt)} prompts; use muser.generate(target, [p1, p2, ...]) for a list, or call "
            f"{function}() once per prompt (each from its own thread or task to run them concurrently)"
        )


def _split(kwargs: Mapping[str, Any], function: str,
           own: Sequence[str] = ()) -> tuple[_Options, CancelToken | None, bool]:
    rest = dict(kwargs)
    cancel = rest.pop("cancel", None)
    parse_special = bool(rest.pop("parse_special", False))
    return _options(function, rest, own), cancel, parse_special


def _chunks(request: _Request) -> Iterator[GenerationChunk]:
    """The chunks of a request started with a channel; leaving early cancels it."""
    with _Stream(request) as chunks:
        yield from chunks


def _collect(requests: list[_Request]) -> list[list[GenerationChunk]]:
    """Every chunk of every request. Requests started with ``collect=True``
    (no channel) are joined; channel requests are drained concurrently (one
    whose chunks nobody read could be cancelled as stalled). An exception
    while waiting (Ctrl-C) cancels and joins every request before it
    propagates."""
    if all(request.collected is not None for request in requests):
        try:
            for request in requests:
                request.thread.join()
        except BaseException:
            _shutdown(requests, _EXIT_JOIN_S)
            raise
        for request in requests:
            if request.error is not None:
                raise request.error
        return [request.collected or [] for request in requests]

    results: list[list[GenerationChunk]] = [[] for _ in requests]
    errors: list[BaseException | None] = [None] * len(requests)

    def drain(index: int) -> None:
        try:
            results[index] = list(_chunks(requests[index]))
        except BaseException as exc:  # re-raised in the caller's thread below
            errors[index] = exc

    helpers = [threading.Thread(target=drain, args=(i,), name=f"muser-collect-{i}", daemon=True)
               for i in range(1, len(requests))]
    try:
        for helper in helpers:
            helper.start()
        drain(0)
        for helper in helpers:
            helper.join()
    except BaseException:
        _shutdown(requests, _EXIT_JOIN_S)
        raise
    for error in errors:
        if error is not None:
            raise error
    return results


def _text(chunks: list[GenerationChunk]) -> str:
    if chunks and chunks[-1].finish_reason == "cancelled":
        raise Cancelled("the generation was cancelled")
    return "".join(chunk.text for chunk in chunks)


@explicit_signature()
def stream(target: Target, prompt: Prompt, **options: Unpack[GenerationOptions]) -> Iterator[GenerationChunk]:
    """Generate from ``prompt`` (text or token ids), yielding :class:`GenerationChunk` s.

    Keyword arguments (:class:`muser.options.GenerationOptions`): ``max_tokens``
    (256), ``stop`` (strings), ``stop_token_ids``, ``seed``, ``grammar``
    (:class:`muser.Grammar`), ``logprobs``, ``top_logprobs``, ``echo``,
    ``context_shift``/``n_keep``, ``timeout`` (the whole request, tokenizing the prompt included),
    ``consumer_timeout`` (5 s), ``special`` (show control tokens),
    ``logits_processors`` and ``stopping_criteria`` (see :mod:`muser.logits_hooks`),
    ``cancel``, ``parse_special``, plus every :class:`muser.SamplingParams`
    field (``temperature``, ``top_k``, ...).
    The last chunk has ``finish_reason`` "stop", "length" or "cancelled".
    Closing the iterator early cancels the request and frees its slot.

    Raises:
        Cancelled: the consumer stalled past ``consumer_timeout``; or, from
            this call, ``cancel`` was cancelled while the prompt was tokenized.
        DeadlineExceeded: from this call, ``timeout`` passed while the prompt
            was tokenized (a text of millions of characters).
        Overloaded, TimeoutError, Unhealthy: from acquiring a slot.
        TypeError: an unknown keyword (the message names the closest valid
            one) or a list of prompts.
        ValueError: bad arguments (checked before anything starts).
    """
    _refuse_prompt_list("stream", prompt)
    parsed, cancel, parse_special = _split(options, "stream")
    (request,) = _start(target, prompt, 1, cancel, parse_special, parsed)
    return _Stream(request)


_stream = stream  # chat's `stream` flag shadows the function inside chat


# (A str is also a Sequence[str], so the first overload must come first; the
# overlap mypy reports is the one every "str or list of str" API has.)
@overload
def generate(target: Target, prompt: Prompt, *, n: Literal[1] = 1,  # type: ignore[overload-overlap]
             **options: Unpack[GenerationOptions]) -> str: ...
@overload
def generate(target: Target, prompt: Prompt, *, n: int, **options: Unpack[GenerationOptions]) -> list[str]: ...
@overload
def generate(target: Target, prompt: Prompts, *, n: Literal[1] = 1,
             **options: Unpack[GenerationOptions]) -> list[str]: ...


@explicit_signature()
def generate(target: Target, prompt: Prompt | Prompts, *, n: int = 1,
             **options: Unpack[GenerationOptions]) -> str | list[str]:
    """Generate a completion of ``prompt`` (a string or token ids).

    ``n`` = 2..slots runs ``n`` completions of one prompt concurrently (seeds
    ``seed``, ``seed`` + 1, ...) and returns a list. A list of prompts (strings,
    or lists of token ids) returns one completion per prompt, in order, run
    through the pool as many at a time as it has slots (with ``seed``,
    prompt i uses ``seed`` + i). Same keywords as :func:`stream`.

    Raises:
        Cancelled: ``cancel`` was cancelled, or the request was.
        DeadlineExceeded: the request ran past ``timeout`` (tokenizing the prompt included).
        TypeError: an unknown keyword (naming the closest valid one).
        ValueError: bad arguments, or ``n`` > 1 with a list of prompts.
    """
    parsed, cancel, parse_special = _split(options, "generate", own=("n",))
    if _is_prompt_list(prompt):
        prompts: list[Prompt] = list(prompt)
        if n != 1:
            raise ValueError(f"generate() with a list of {len(prompts)} prompts takes n=1 (one completion "
                             "each); repeat a prompt in the list to get several completions of it")
        # In windows of the pool's slots: every request of a window runs at
        # once, and a long list never piles past the pool's waiting limit.
        width = _pool_of(target).slots
        limits.check_seed(parsed.seed, len(prompts))  # prompt i uses seed + i: all must fit in 32 bits
        texts: list[str] = []
        for first in range(0, len(prompts), width):
            requests: list[_Request] = []
            try:
                for index in range(first, min(first + width, len(prompts))):
                    seeded = parsed if parsed.seed is None else \
                        dataclasses.replace(parsed, seed=parsed.seed + index)
                    (request,) = _start(target, prompts[index], 1, cancel, parse_special, seeded, collect=True)
                    requests.append(request)
            except BaseException:
                _shutdown(requests, _EXIT_JOIN_S)
                raise
            texts += [_text(chunks) for chunks in _collect(requests)]
        return texts
    one_prompt = cast(Prompt, prompt)  # (not a list of prompts, checked above)
    texts = [_text(chunks) for chunks in _collect(_start(target, one_prompt, n, cancel, parse_special, parsed,
                                                         collect=True))]
    return texts[0] if n == 1 else texts


@explicit_signature()
async def astream(target: Target, prompt: Prompt,
                  **options: Unpack[GenerationOptions]) -> AsyncIterator[GenerationChunk]:
    """``async for`` version of :func:`stream`; the event loop is never
    blocked and no executor thread is used (the producer hands chunks to the
    loop), so concurrent async requests are bounded only by admission."""
    _refuse_prompt_list("astream", prompt)
    parsed, cancel, parse_special = _split(options, "astream")
    loop = asyncio.get_running_loop()
    (request,) = _start(target, prompt, 1, cancel, parse_special, parsed, loop=loop)
    channel = cast(_Channel, request.channel)
    try:
        while True:
            item = await channel.aget()
            if item is _END:
                break
            yield cast(GenerationChunk, item)
        if request.error is not None:
            raise request.error
    finally:
        request.abandon()
        channel.drain()


def render_chat(
    target: Target,
    messages: Sequence[Mapping[str, Any]],
    template: str | None = None,
    add_generation_prompt: bool = True,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The prompt text ``chat`` would send, from the model's or the given template.

    ``tools`` (OpenAI-style function specs), ``documents`` and ``template_kwargs``
    are passed to the template as variables, as transformers'
    ``apply_chat_template`` does.

    Raises:
        ChatTemplateError: the model has no template and none was given, or rendering failed.
    """
    engine = _pool_of(target).engine
    source = template if template is not None else engine.config.get("chat_template")
    if not source:
        raise ChatTemplateError(
            f"the model {engine.config.get('name')!r} has no chat template; pass template=... to "
            "muser.chat (or --template on the command line: python -m muser chat --template FILE_OR_TEXT), "
            "or use muser.generate with a plain prompt"
        )
    tokenizer = engine.tokenizer
    bos = engine.detokenize([tokenizer.bos_id], remove_special=False, unparse_special=True) \
        if tokenizer.bos_id >= 0 else ""
    eos = engine.detokenize([tokenizer.eos_id], remove_special=False, unparse_special=True) \
        if tokenizer.eos_id >= 0 else ""
    return ChatTemplate(source).render(messages, add_generation_prompt=add_generation_prompt,
                                       bos_token=bos, eos_token=eos, tools=tools, documents=documents,
                                       **dict(template_kwargs or {}))


@overload
def chat(target: Target, messages: Sequence[Mapping[str, Any]], *, template: str | None = None,
         stream: Literal[False] = False, tools: Sequence[Mapping[str, Any]] | None = None,
         documents: Sequence[Mapping[str, Any]] | None = None,
         template_kwargs: Mapping[str, Any] | None = None, **options: Unpack[GenerationOptions]) -> str: ...
@overload
def chat(target: Target, messages: Sequence[Mapping[str, Any]], *, template: str | None = None,
         stream: Literal[True], tools: Sequence[Mapping[str, Any]] | None = None,
         documents: Sequence[Mapping[str, Any]] | None = None,
         template_kwargs: Mapping[str, Any] | None = None,
         **options: Unpack[GenerationOptions]) -> Iterator[GenerationChunk]: ...


@explicit_signature(extra=("parse_special",))  # chat always parses the rendered template's control tokens
def chat(
    target: Target,
    messages: Sequence[Mapping[str, Any]],
    *,
    template: str | None = None,
    stream: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    **options: Unpack[GenerationOptions],
) -> str | Iterator[GenerationChunk]:
    """Reply to a conversation: render the chat template (sandboxed Jinja2,
    with ``tools``/``documents``/``template_kwargs`` passed through), then
    generate (``stream=True`` gives chunks). Same keywords as :func:`stream`.

    Raises:
        ChatTemplateError: the model has no template and none was given, or
            the messages are malformed.
        TypeError: an unknown keyword (naming the closest valid one).
    """
    check_keywords("chat", options, _OPTION_KEYWORDS | {"cancel", "template", "stream", "tools", "documents",
                                                          "template_kwargs"})
    if "parse_special" in options:
        raise TypeError("chat() always parses the control tokens of the rendered template; "
                        "drop parse_special=")
    if isinstance(messages, Sequence) and messages and all(
            isinstance(m, Sequence) and not isinstance(m, (str, bytes)) for m in messages):
        raise TypeError(f"chat() takes one conversation (a list of message dicts), got a list of {len(messages)} "
                        "conversations; call chat() once per conversation (from threads to run them "
                        "concurrently), or render each with muser.generation.render_chat and pass the list "
                        "to muser.generate")
    prompt = render_chat(target, messages, template, tools=tools, documents=documents,
                         template_kwargs=template_kwargs)
    rendered: GenerationOptions = {**options, "parse_special": True}
    if stream:
        return _stream(target, prompt, **rendered)
    text: str = generate(target, prompt, **rendered)
    return text
