"""SlotPool: share one engine between up to four concurrent generations.

A pool holds 1..4 resident sessions ("slots"). Each request acquires a slot
(at most ``max_waiting`` callers queue, the next one gets
:class:`muser.Overloaded` at once), prefills its prompt and decodes. Decode
steps of concurrent requests, whether from ``generate``/``stream`` or from
threads driving slots directly, are packed into one weight pass by the
pool's decode batcher, so four requests cost far less than four times one.

Slot choice prefers the free slot whose history shares the longest prefix
with the new prompt: those tokens are not computed again
(:attr:`Slot.reused_tokens`). When slots are short, the waiter whose prompt
has the longest cached prefix goes first, with aging: no waiter is passed
over more than ``_core.ADMISSION_MAX_PASSED_OVER`` times, and beyond 128
waiters the queue is first come, first served.

Thread safety: share one pool between any number of threads. A slot belongs
to the thread that acquired it until its lease ends; using it afterwards
raises :class:`muser.SlotReleased`. Every blocking call releases the GIL.
Lifecycle: ``close()`` (or leaving ``with SlotPool(...) as pool:``) cancels
and joins the pool's in-flight generations, then latches it.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from muser import _core, limits
from muser.engine import Engine, Session
from muser.errors import InternalError, Overloaded, SlotReleased, Unhealthy
from muser.keywords import checked_keywords

__all__ = ["CancelToken", "Lease", "Slot", "SlotPool"]

CancelToken = _core.CancelToken
"""A sticky, thread-safe cancellation flag: ``token.cancel()``, ``token.cancelled``."""

log = logging.getLogger("muser")

# Exceptions after which a slot's state (or the accelerator's) is unknown:
# a lease ending with one of these latches the pool unhealthy.
_UNKNOWN_STATE = (InternalError, Unhealthy)


class Slot:
    """A leased slot: one resident session, used by one request at a time.

    ``decode`` goes through the pool's batcher (packed with other slots'
    steps); everything else acts on the slot's session. Once the lease ends
    every member raises :class:`muser.SlotReleased`: the slot may already
    serve another request.
    """

    __slots__ = ("_pool", "index", "reused_tokens", "_cancel", "_released")

    def __init__(self, pool: SlotPool, index: int, reused_tokens: int, cancel: CancelToken | None) -> None:
        self._pool = pool
        self.index = index
        self.reused_tokens = reused_tokens
        """Prompt tokens found already in this slot's history at acquire time."""
        self._cancel = cancel
        self._released = False

    def _check_leased(self) -> None:
        if self._released:
            raise SlotReleased(f"slot {self.index} was used after its lease ended")

    @property
    def session(self) -> Session:
        """The session now serving this slot (a context shift replaces it).
        Valid only while the lease lasts."""
        self._check_leased()
        return Session(self._pool._core.session(self.index), self._pool.engine)

    def prefill(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` (see :meth:`Session.prefill`); honours the lease's cancel token.

        Raises:
            Unhealthy: the pool latched (even for leases already held).
        """
        self._check_leased()
        ids = limits.check_token_ids("tokens", tokens, self._pool.engine.n_vocab)
        self._pool._core.prefill(self.index, list(ids), self._cancel)

    def decode(self, token: int) -> None:
        """Append one token, packed with concurrent decodes of other slots.

        Raises:
            Cancelled: the lease's cancel token was cancelled while queued.
            ValueError, ContextOverflow: as :meth:`Session.decode`; nothing
                changed, and the other rows of the group are unaffected.
            Unhealthy: the pool latched (even for leases already held).
        """
        self._check_leased()
        (token,) = limits.check_token_ids("token", (token,), self._pool.engine.n_vocab)
        self._pool._core.decode(self.index, token, self._cancel)

    @property
    def logits(self) -> np.ndarray | None:
        """Next-token logits after the last token (a new array), or None."""
        return self.session.logits

    @property
    def tokens(self) -> list[int]:
        """The slot's token history (a copy)."""
        return self.session.tokens

    @property
    def n_past(self) -> int:
        return self.session.n_past

    @property
    def max_context(self) -> int:
        return self._pool.max_context

    def context_shift(self, n_keep: int) -> int:
        """Make room: keep the first ``n_keep`` tokens and the newest half of the
        rest. The shortened context is rebuilt in the pool's staging session and
        swapped in only when complete. Returns the new ``n_past``.

        ``n_keep`` is bounded as generation's ``context_shift`` bounds it: at
        most ``max_context // 2``, so that a shift of a full context frees at
        least ``muser.limits.MIN_SHIFT_FREED_FRACTION`` of it (a larger
        ``n_keep`` would free a position or two per shift and re-prefill the
        whole context for every token).

        Raises:
            ValueError: ``n_keep`` negative, above ``max_context // 2`` or above
                ``n_past``. The slot is unchanged on any failure.
        """
        self._check_leased()
        n_keep = limits.check_n_keep(n_keep, self.max_context, context_shift=True)
        n_past = self.n_past
        if n_keep > n_past:
            raise ValueError(f"n_keep must be at most the slot's n_past = {n_past}, got {n_keep}")
        n_past = self._pool._core.context_shift(self.index, n_keep, self._cancel)
        log.info("slot %d: context shift (kept %d tokens at the start), now %d tokens", self.index, n_keep, n_past)
        return n_past


class Lease:
    """Ownership of one slot; a context manager. Use as ``with pool.acquire() as slot:``.

    Leaving the block releases the slot. If the block raised
    :class:`muser.InternalError` or :class:`muser.Unhealthy` (the slot or the
    accelerator is in an unknown state) the pool latches unhealthy; any other
    exception just releases the slot.
    """

    __slots__ = ("_pool", "slot", "_released")

    def __init__(self, pool: SlotPool, slot: Slot) -> None:
        self._pool = pool
        self.slot = slot
        self._released = False

    def __enter__(self) -> Slot:
        return self.slot

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.release(healthy=not (exc is not None and isinstance(exc, _UNKNOWN_STATE)))

    def release(self, healthy: bool = True) -> None:
        """Give the slot back (idempotent). ``healthy=False`` latches the pool unhealthy."""
        if not self._released:
            self._released = True
            self.slot._released = True  # before the core release: the slot may be re-leased at once
            if not healthy:
                log.warning("slot %d ended in an unknown state: the pool is now unhealthy", self.slot.index)
            self._pool._core.release(self.slot.index, healthy)
            log.debug("released slot %d", self.slot.index)


class SlotPool:
    """Up to four concurrent generations on one engine.

    Args:
        engine: the engine whose sessions the slots are.
        slots: resident sessions, 1..4.
        max_waiting: callers that may queue for a slot; one more raises Overloaded.
        max_context: each slot's context limit (default ``min(4096, training context)``).
        batch_window_us: how long a decode step waits for other slots' steps to
            join its group (only while more could still arrive; unused with one slot);
            0 to ``muser.limits.MAX_BATCH_WINDOW_US``.

    Raises:
        ValueError: an argument outside its range.
    """

    @checked_keywords
    def __init__(
        self,
        engine: Engine,
        slots: int = _core.MAX_SLOTS,
        max_waiting: int = _core.DEFAULT_MAX_WAITING,
        *,
        max_context: int | None = None,
        batch_window_us: float = _core.DEFAULT_BATCH_WINDOW_US,
    ) -> None:
        if not isinstance(engine, Engine):
            raise TypeError(f"engine must be a muser.Engine, got {type(engine).__name__}")
        slots = limits.check_int("slots", slots, 1, _core.MAX_SLOTS)
        max_waiting = limits.check_int("max_waiting", max_waiting, 0)
        context_length = int(engine.config["context_length"])
        if max_context is None:
            max_context = min(_core.DEFAULT_MAX_CONTEXT, context_length)
        max_context = limits.check_int("max_context", max_context, 1, context_length)
        batch_window_us = limits.check_batch_window_us(batch_window_us)
        self.engine = engine
        self.max_context = max_context
        self._core = _core.SlotPool(engine._core, slots, max_waiting, max_context, float(batch_window_us))
        log.info("slot pool: %d slots, max_context %d, max_waiting %d, batch window %g us",
                 slots, max_context, max_waiting, batch_window_us)
        # Generations running on this pool (muser.generation registers them),
        # so close() can cancel and join them; and their outcome counts.
        self._requests: weakref.WeakSet[Any] = weakref.WeakSet()
        self._telemetry_lock = threading.Lock()  # also guards _requests (WeakSets are not thread-safe)
        self._outcomes: Counter[str] = Counter()
        self._sampling_ns = 0
        self._closed = False
        engine._add_pool(self)

    def _add_request(self, request: Any) -> None:
        with self._telemetry_lock:
            self._requests.add(request)

    def acquire(
        self,
        prompt: Sequence[int] = (),
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> Lease:
        """Wait for a slot (preferring one whose history starts like ``prompt``).

        The slot comes back rewound to the longest shared prefix, so the caller
        prefills only ``prompt[slot.reused_tokens:]``.

        Raises:
            Overloaded: ``max_waiting`` callers are already queued.
            TimeoutError: no slot freed up within ``timeout`` seconds (``None`` or
                ``inf`` waits without limit; NaN or a negative value is a ValueError).
            Cancelled: ``cancel`` was cancelled while waiting.
            Unhealthy: the pool latched unhealthy; make a new one.
        """
        tokens = limits.check_token_ids("prompt", prompt, self.engine.n_vocab)
        try:
            index, reused = self._core.acquire(tokens, limits.check_timeout("timeout", timeout), cancel)
        except Overloaded:
            log.warning("slot pool overloaded: %d callers already waiting", self._core.stats()["admission"]
                        .get("waiting", -1))
            raise
        log.debug("acquired slot %d (%d of %d prompt tokens already cached)", index, reused, len(tokens))
        return Lease(self, Slot(self, index, reused, cancel))

    @property
    def slots(self) -> int:
        return self._core.slots

    @property
    def healthy(self) -> bool:
        """False once a lease ended in an unknown state (or the pool was
        closed); then every acquire, and every prefill/decode of leases still
        held, raises Unhealthy."""
        return self._core.healthy

    @property
    def unhealthy_reason(self) -> str:
        """Why the pool latched unhealthy (``""`` while healthy)."""
        return self._core.unhealthy_reason

    def _record_outcome(self, outcome: str, sampling_ns: int) -> None:
        with self._telemetry_lock:
            self._outcomes[outcome] += 1
            self._sampling_ns += sampling_ns

    def stats(self) -> dict[str, Any]:
        """Telemetry (a new dict):

        - ``admission``: admissions, rejections, timeouts, cancellations,
          admission wait, waiting, in use;
        - ``batcher``: groups, rows, group-size histogram, queue wait;
        - ``requests``: generations that ``finished``, ``failed``, were
          ``cancelled`` or hit their deadline (``deadline_exceeded``);
        - ``time_ns``: where request time went, summed: ``queue_wait``
          (waiting for a slot), ``batch_wait`` (decode rows waiting for their
          group), ``permit_wait`` and ``forward`` (the engine's accelerator
          permits, all pools of the engine), ``sampling`` (sampling, grammar
          and detokenizing in generations);
        - ``prefix_hits`` / ``prefix_misses`` (admissions that did / did not
          reuse cached tokens), ``reused_prefix_tokens``, ``kv_bytes`` (KV
          memory the slots hold), ``context_shifts``;
        - ``scheduler``: the engine's permit counts and wait/hold nanoseconds.
        """
        stats = self._core.stats()
        scheduler = self.engine.scheduler_stats()
        stats["scheduler"] = scheduler
        with self._telemetry_lock:
            stats["requests"] = {key: self._outcomes[key]
                                 for key in ("finished", "failed", "cancelled", "deadline_exceeded")}
            sampling_ns = self._sampling_ns
        stats["time_ns"] = {
            "queue_wait": stats["admission"]["admission_wait_ns"],
            "batch_wait": stats["batcher"]["queue_wait_ns"],
            "permit_wait": scheduler["permit_wait_ns"],
            "forward": scheduler["permit_hold_ns"],
            "sampling": sampling_ns,
        }
        return stats

    def close(self, timeout: float = 30.0) -> None:
        """Cancel this pool's in-flight generations, wait (up to ``timeout``
        seconds in all) for their threads to end, and latch the pool: later
        acquires raise :class:`muser.Unhealthy` ("closed"). Idempotent."""
        from muser.generation import _shutdown

        self._closed = True
        with self._telemetry_lock:
            requests = list(self._requests)
        _shutdown(requests, timeout)
        self._core.mark_unhealthy("the pool was closed")

    def __enter__(self) -> SlotPool:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SlotPool(slots={self.slots}, healthy={self.healthy})"
