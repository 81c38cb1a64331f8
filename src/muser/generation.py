"""Text generation: ``generate``, ``stream``, ``astream`` and ``chat``.

Each request runs in its own producer thread: tokenize, acquire a slot of the
pool, prefill what the slot does not already hold, then per token sample,
check the grammar, detokenize, match stop strings and decode. Tokenization,
sampling, grammar and detokenization never run while the accelerator is held
(the compiled core holds it only inside a forward).

Output goes through a bounded channel of 64 chunks. A consumer that leaves it
full for ``consumer_timeout`` seconds (5 by default) gets the request
cancelled with :class:`muser.Cancelled` and the slot freed: a slow consumer
never holds a slot, let alone the accelerator, hostage.

Thread safety: call these from any number of threads at once; they share the
pool safely. A stream iterator belongs to the thread iterating it.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import operator
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from muser.chat_template import ChatTemplate, ChatTemplateError
from muser.engine import Engine
from muser.errors import Cancelled
from muser.grammar import Grammar
from muser.pool import CancelToken, SlotPool
from muser.sampling import SamplingParams, make_sampler
from muser.text.detokenizer import StreamingDetokenizer
from muser.text.stops import StopMatcher
from muser.types import GenerationChunk, GenerationTimings, TokenLogprob

__all__ = ["astream", "chat", "generate", "stream", "CHANNEL_DEPTH", "CONSUMER_TIMEOUT_S"]

CHANNEL_DEPTH = 64
CONSUMER_TIMEOUT_S = 5.0
PREFILL_PIECE = 512  # prompt tokens per prefill call: the cancellation granularity

Target = Union[SlotPool, Engine]
_END = object()
_REQUEST_IDS = itertools.count(1)  # labels requests in schedule recordings (muser.testing)


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
    consumer_timeout: float
    params: SamplingParams
    special: bool


def _pool_of(target: Target) -> SlotPool:
    if isinstance(target, SlotPool):
        return target
    if isinstance(target, Engine):
        return target.default_pool()
    raise TypeError(f"expected a muser.SlotPool or muser.Engine, got {type(target).__name__}")


def _options(
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
    consumer_timeout: float = CONSUMER_TIMEOUT_S,
    special: bool = False,
    **sampling: Any,
) -> _Options:
    max_tokens = operator.index(max_tokens)
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if top_logprobs < 0:
        raise ValueError(f"top_logprobs must be >= 0, got {top_logprobs}")
    if consumer_timeout <= 0:
        raise ValueError(f"consumer_timeout must be > 0, got {consumer_timeout}")
    if grammar is not None and not isinstance(grammar, Grammar):
        raise TypeError(f"grammar must be a muser.Grammar, got {type(grammar).__name__}")
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    return _Options(
        max_tokens=max_tokens, stop=stops, stop_token_ids=tuple(int(t) for t in stop_token_ids), seed=seed,
        grammar=grammar, logprobs=logprobs, top_logprobs=operator.index(top_logprobs), echo=echo,
        context_shift=context_shift, n_keep=operator.index(n_keep), timeout=timeout,
        consumer_timeout=consumer_timeout, params=SamplingParams(**sampling), special=special,
    )


def _prompt_tokens(engine: Engine, prompt: str | Sequence[int], parse_special: bool) -> list[int]:
    if isinstance(prompt, str):
        tokens = engine.tokenize(prompt, add_special=True, parse_special=parse_special)
    else:
        tokens = [operator.index(t) for t in prompt]
    if not tokens:
        raise ValueError("the prompt is empty (no tokens to condition on)")
    return tokens


class _Request:
    """One completion, produced on its own thread into a bounded channel."""

    def __init__(self, pool: SlotPool, tokens: list[int], options: _Options, seed: int | None,
                 index: int, user_cancel: CancelToken | None) -> None:
        self.pool = pool
        self.engine = pool.engine
        self.tokens = tokens
        self.options = options
        self.seed = seed
        self.index = index
        # The caller's token (shared by all n completions of a call) stops the
        # request; our own token also stops it when the consumer goes away,
        # without touching the caller's. Blocking waits in the core watch the
        # caller's token when there is one.
        self.user_cancel = user_cancel
        self.own_cancel = CancelToken()
        self.wait_cancel = user_cancel if user_cancel is not None else self.own_cancel
        self.channel: queue.Queue = queue.Queue(maxsize=CHANNEL_DEPTH)
        self.error: BaseException | None = None
        self.stalled = False
        self.finish_reason: str | None = None
        self.request_id = next(_REQUEST_IDS)
        self.recorder = pool.engine._core.schedule_recorder
        self.thread = threading.Thread(target=self._run, name=f"muser-request-{index}", daemon=True)

    def start(self) -> "_Request":
        self.thread.start()
        return self

    # -- producer side -----------------------------------------------------

    def _note(self, what: str, slot: int = -1, detail: str = "") -> None:
        # Schedule recording (engine.record_schedule()): one attribute read when off.
        if self.recorder.recording:
            self.recorder.note(what, self.request_id, self.pool._core.id, slot, detail)

    def _emit(self, chunk: GenerationChunk) -> None:
        try:
            self.channel.put(chunk, timeout=self.options.consumer_timeout)
            if chunk.finish_reason is not None:
                self.finish_reason = chunk.finish_reason
        except queue.Full:
            self.stalled = True
            raise Cancelled(
                f"the consumer left the output channel full for {self.options.consumer_timeout:g} s"
            ) from None

    def _cancelled(self) -> bool:
        return self.own_cancel.cancelled or (self.user_cancel is not None and self.user_cancel.cancelled)

    def _run(self) -> None:
        self._note("request_started")
        try:
            self._generate()
        except Cancelled as exc:
            if self.stalled or not self._cancelled():
                self.error = exc
            else:  # the caller cancelled while we waited in the core: an ordinary end
                try:
                    self.channel.put_nowait(GenerationChunk("", finish_reason="cancelled", index=self.index))
                    self.finish_reason = "cancelled"
                except queue.Full:
                    self.error = exc
        except BaseException as exc:  # handed to the consumer, re-raised there
            self.error = exc
        finally:
            self._note("request_ended", detail=type(self.error).__name__ if self.error else str(self.finish_reason))
            self.channel.put(_END)  # the consumer drains; it never stays blocked

    def _logprob_fields(self, logits: np.ndarray, token: int):
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
        with self.pool.acquire(self.tokens, timeout=options.timeout, cancel=self.wait_cancel) as slot:
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
            self.pool._core.begin_decoding()
            try:
                self._decode_loop(slot, chain, detok, stops, timings)
            finally:
                self.pool._core.end_decoding()

    def _decode_loop(self, slot, chain, detok, stops, timings) -> None:
        options = self.options
        for step in range(options.max_tokens):
            if self._cancelled():
                self._emit(GenerationChunk(stops.flush(), finish_reason="cancelled", index=self.index,
                                           timings=timings(step)))
                return
            logits = slot.logits
            token = chain.sample(logits)
            chain.accept(token)
            logprob, top = self._logprob_fields(logits, token)
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
        self.own_cancel.cancel()
        try:
            while True:
                self.channel.get_nowait()
        except queue.Empty:
            pass


def _drain(detok: StreamingDetokenizer, stops: StopMatcher) -> str:
    """The text still held back when generation ends for a reason other than a stop string."""
    check = stops.push(detok.flush())
    return check.text if check.stopped else check.text + stops.flush()


def _start(target: Target, prompt: str | Sequence[int], n: int, cancel: CancelToken | None,
           parse_special: bool, options: _Options) -> list[_Request]:
    pool = _pool_of(target)
    n = operator.index(n)
    if not 1 <= n <= pool.slots:
        raise ValueError(f"n must be 1..{pool.slots} (the pool's slots), got {n}")
    tokens = _prompt_tokens(pool.engine, prompt, parse_special)
    if len(tokens) >= pool.max_context:
        raise ValueError(f"the prompt has {len(tokens)} tokens; the pool's max_context is {pool.max_context}")
    seeds = [None if options.seed is None else (options.seed + i) & 0xFFFFFFFF for i in range(n)]
    return [_Request(pool, tokens, options, seeds[i], i, cancel).start() for i in range(n)]


def _chunks(request: _Request) -> Iterator[GenerationChunk]:
    try:
        while True:
            item = request.channel.get()
            if item is _END:
                break
            yield item
        if request.error is not None:
            raise request.error
    finally:
        request.abandon()


def stream(
    target: Target,
    prompt: str | Sequence[int],
    *,
    cancel: CancelToken | None = None,
    parse_special: bool = False,
    **kwargs: Any,
) -> Iterator[GenerationChunk]:
    """Generate from ``prompt`` (text or token ids), yielding :class:`GenerationChunk` s.

    Keyword arguments: ``max_tokens`` (256), ``stop`` (strings), ``stop_token_ids``,
    ``seed``, ``grammar`` (:class:`muser.Grammar`), ``logprobs``, ``top_logprobs``,
    ``echo``, ``context_shift``/``n_keep``, ``timeout`` (waiting for a slot),
    ``consumer_timeout`` (5 s), ``special`` (show control tokens), plus any
    :class:`muser.SamplingParams` field (``temperature``, ``top_k``, ...).
    The last chunk has ``finish_reason`` "stop", "length" or "cancelled".
    Closing the iterator early cancels the request and frees its slot.

    Raises:
        Cancelled: the consumer stalled past ``consumer_timeout``.
        Overloaded, TimeoutError, Unhealthy: from acquiring a slot.
        ValueError: bad arguments (checked before anything starts).
    """
    options = _options(**kwargs)
    (request,) = _start(target, prompt, 1, cancel, parse_special, options)
    return _chunks(request)


def generate(
    target: Target,
    prompt: str | Sequence[int],
    *,
    n: int = 1,
    cancel: CancelToken | None = None,
    parse_special: bool = False,
    **kwargs: Any,
) -> str | list[str]:
    """Generate a completion (``n`` = 1) or ``n`` completions run concurrently
    (``n`` = 2..4, seeds ``seed``, ``seed`` + 1, ...). Same keywords as :func:`stream`.

    Raises:
        Cancelled: ``cancel`` was cancelled, or the request was.
    """
    options = _options(**kwargs)
    requests = _start(target, prompt, n, cancel, parse_special, options)
    texts = []
    for request in requests:
        parts = []
        for chunk in _chunks(request):
            parts.append(chunk.text)
            if chunk.finish_reason == "cancelled":
                raise Cancelled("the generation was cancelled")
        texts.append("".join(parts))
    return texts[0] if n == 1 else texts


async def astream(
    target: Target,
    prompt: str | Sequence[int],
    *,
    cancel: CancelToken | None = None,
    parse_special: bool = False,
    **kwargs: Any,
) -> AsyncIterator[GenerationChunk]:
    """``async for`` version of :func:`stream`; the event loop is never blocked."""
    options = _options(**kwargs)
    (request,) = _start(target, prompt, 1, cancel, parse_special, options)
    loop = asyncio.get_running_loop()
    try:
        while True:
            item = await loop.run_in_executor(None, request.channel.get)
            if item is _END:
                break
            yield item
        if request.error is not None:
            raise request.error
    finally:
        request.abandon()


def render_chat(target: Target, messages: Sequence[Mapping[str, Any]], template: str | None = None,
                add_generation_prompt: bool = True) -> str:
    """The prompt text ``chat`` would send, from the model's or the given template."""
    engine = _pool_of(target).engine
    source = template if template is not None else engine.config.get("chat_template")
    if not source:
        raise ChatTemplateError(
            f"the model {engine.config.get('name')!r} has no chat template; pass template=... "
            "(a Jinja2 chat template) or use muser.generate with a plain prompt"
        )
    tokenizer = engine.tokenizer
    bos = engine.detokenize([tokenizer.bos_id], remove_special=False, unparse_special=True) \
        if tokenizer.bos_id >= 0 else ""
    eos = engine.detokenize([tokenizer.eos_id], remove_special=False, unparse_special=True) \
        if tokenizer.eos_id >= 0 else ""
    return ChatTemplate(source).render(messages, add_generation_prompt=add_generation_prompt,
                                       bos_token=bos, eos_token=eos)


def chat(
    target: Target,
    messages: Sequence[Mapping[str, Any]],
    *,
    template: str | None = None,
    stream: bool = False,
    **kwargs: Any,
) -> str | Iterator[GenerationChunk]:
    """Reply to a conversation: render the chat template (sandboxed Jinja2),
    then generate (``stream=True`` gives chunks). Same keywords as :func:`stream`.

    Raises:
        ChatTemplateError: the model has no template and none was given, or
            the messages are malformed.
    """
    prompt = render_chat(target, messages, template)
    if stream:
        return globals()["stream"](target, prompt, parse_special=True, **kwargs)
    return generate(target, prompt, parse_special=True, **kwargs)
