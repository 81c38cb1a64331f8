"""The event log of an engine's real scheduling: ``with engine.record_schedule() as log:``.

While the block runs, the engine's compiled core records every accelerator
permit (a decode group or a prefill chunk: requested, granted, released),
every admission to every pool built on that engine, every lease, every decode
group the pools' batchers formed, every cancellation, and each request of
``muser.generate``/``stream``/``chat`` (started, admitted, ended). The log is
live inside the block (each access sees the events so far) and frozen when
the block ends.

Order: ``Moment.seq`` numbers events in the order they reached the log.
Permit events are recorded under the scheduler's lock and admission events
under their pool's admission lock, so the order among permits, and among one
pool's admissions, is exact; checkers rely on ``seq``, never on wall-clock
time. Times are seconds since recording started, for humans.

Start recording before the workload starts: work already waiting when the
recording begins is not in the log.

Thread safety: a log may be read from any thread; recording is per engine,
one at a time (a second ``record_schedule`` on the same engine raises
``ValueError`` while the first is open).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from muser.engine import Engine

__all__ = [
    "AdmissionRecord",
    "CancellationRecord",
    "DecodeGroupRecord",
    "Moment",
    "PermitRecord",
    "RequestRecord",
    "ScheduleEvent",
    "ScheduleLog",
    "record_schedule",
]


class Moment(NamedTuple):
    """When something happened: ``seq`` (its order in the log) and ``time`` (seconds since recording began)."""

    seq: int
    time: float

    def __str__(self) -> str:
        return f"#{self.seq} (t={self.time * 1e3:.1f} ms)"


def moment_of(moment: Moment | None) -> Moment:
    """A moment known to be set (the record was filtered on it): typed as such."""
    if moment is None:
        raise ValueError("a schedule record lacks the moment it was selected for")
    return moment


def seq_of(moment: Moment | None) -> int:
    """``moment.seq`` of a moment known to be set."""
    return moment_of(moment).seq


class ScheduleEvent(NamedTuple):
    """One raw event, as the core recorded it (see ``csrc/engine/schedule_recorder.h``)."""

    seq: int
    time_ns: int
    kind: str
    subject: int
    pool: int
    slot: int
    rows: int
    sessions: tuple[int, ...]
    slots: tuple[int, ...]
    what: str
    detail: str

    @property
    def moment(self) -> Moment:
        return Moment(self.seq, self.time_ns / 1e9)


@dataclass
class PermitRecord:
    """One use of the accelerator: a decode group (1..4 rows) or one prefill chunk.

    ``rows`` is the group size or the chunk's rows (``None`` for a one-row
    prefill permit that recomputes logits, as ``truncate`` does).
    ``contended`` says whether the scheduler cut a prefill chunk short
    because decoders were active. ``refused`` names why a request never got
    the permit (``"unhealthy"``). Moments are ``None`` when they fell outside
    the recording.
    """

    id: int
    kind: str
    sessions: tuple[int, ...]
    requested: Moment
    granted: Moment | None = None
    released: Moment | None = None
    refused: str | None = None
    refused_at: Moment | None = None
    rows: int | None = None
    contended: bool | None = None

    @property
    def ended(self) -> Moment | None:
        """When it stopped waiting (granted or refused)."""
        return self.granted if self.granted is not None else self.refused_at

    def describe(self) -> str:
        who = ", ".join(map(str, self.sessions)) or "?"
        size = "" if self.rows is None else f", {self.rows} row{'s' if self.rows != 1 else ''}"
        return f"{self.kind} permit {self.id} (session{'s' if len(self.sessions) != 1 else ''} {who}{size})"


@dataclass
class AdmissionRecord:
    """One caller's way through a pool's admission, and the lease it got.

    ``ticket`` is the arrival order within the pool (0 when the caller was
    refused before queueing: ``"overloaded"``, or ``"unhealthy"``).
    """

    pool: int
    ticket: int
    requested: Moment | None
    admitted: Moment | None = None
    slot: int | None = None
    refused: str | None = None
    refused_at: Moment | None = None
    session: int | None = None
    reused_tokens: int | None = None
    released: Moment | None = None
    release_state: str | None = None

    @property
    def ended(self) -> Moment | None:
        """When it stopped waiting (admitted or refused)."""
        return self.admitted if self.admitted is not None else self.refused_at

    def describe(self) -> str:
        return f"pool {self.pool} ticket {self.ticket}"


@dataclass
class DecodeGroupRecord:
    """A group the pool's batcher formed: slots and their sessions in rotation order."""

    pool: int
    slots: tuple[int, ...]
    sessions: tuple[int, ...]
    at: Moment


@dataclass
class CancellationRecord:
    """A cancellation noticed by the core: ``where`` is ``"admission"`` (while
    waiting for a slot), ``"decode"``/``"decode_queue"`` (before or while
    queued for a decode group) or ``"prefill"`` (at a chunk boundary)."""

    where: str
    at: Moment
    pool: int = 0
    slot: int | None = None
    session: int | None = None


@dataclass
class RequestRecord:
    """A ``generate``/``stream``/``chat`` request: its start, slot and every end recorded.

    ``outcomes`` holds one entry per recorded end: the finish reason
    (``"stop"``, ``"length"``, ``"cancelled"``) or the error's type name.
    """

    id: int
    pool: int
    started: Moment
    admitted: Moment | None = None
    slot: int | None = None
    ends: list[tuple[Moment, str]] = field(default_factory=list)

    @property
    def outcome(self) -> str | None:
        return self.ends[-1][1] if self.ends else None


class ScheduleLog:
    """What an engine's scheduler did, as records built from the raw events.

    Build one with ``engine.record_schedule()`` (live while recording), or
    :meth:`from_events` (any list of :class:`ScheduleEvent`, e.g. from a
    simulated scheduler in a test of your own checkers).
    """

    def __init__(self, events: list[ScheduleEvent] | None = None, dropped: int = 0) -> None:
        self._recorder: Any = None
        self._frozen: list[ScheduleEvent] = list(events or [])
        self._dropped = dropped
        self._cache_key: int | None = None
        self._cache: dict[str, Any] = {}

    @classmethod
    def from_events(cls, events: list[ScheduleEvent] | list[tuple[Any, ...]], dropped: int = 0) -> ScheduleLog:
        return cls([e if isinstance(e, ScheduleEvent) else _event(e) for e in events], dropped)

    # -- recording ----------------------------------------------------------

    @property
    def recording(self) -> bool:
        return self._recorder is not None

    @property
    def events(self) -> list[ScheduleEvent]:
        """Every raw event so far, oldest first (a new list)."""
        if self._recorder is not None:
            return [_event(e) for e in self._recorder.events()]
        return list(self._frozen)

    @property
    def dropped(self) -> int:
        """Events lost because the log reached its size limit (checkers refuse such logs)."""
        return self._recorder.dropped if self._recorder is not None else self._dropped

    def _built(self) -> dict[str, Any]:
        events = self.events
        key = len(events) if self._recorder is None else None
        if key is not None and key == self._cache_key:
            return self._cache
        built = _build(events)
        if key is not None:
            self._cache_key, self._cache = key, built
        return built

    # -- records ------------------------------------------------------------

    @property
    def permits(self) -> list[PermitRecord]:
        """Every permit requested during the recording, in request order."""
        return list(self._built()["permits"])

    def grants(self) -> list[PermitRecord]:
        """Granted permits in grant order."""
        return sorted((p for p in self.permits if p.granted is not None), key=lambda p: seq_of(p.granted))

    @property
    def admissions(self) -> list[AdmissionRecord]:
        """Every admission attempt of every pool on the engine, in arrival order."""
        return list(self._built()["admissions"])

    @property
    def decode_groups(self) -> list[DecodeGroupRecord]:
        return list(self._built()["decode_groups"])

    @property
    def cancellations(self) -> list[CancellationRecord]:
        return list(self._built()["cancellations"])

    @property
    def requests(self) -> list[RequestRecord]:
        """Requests of the generation API, in start order."""
        return list(self._built()["requests"])

    @property
    def pools(self) -> list[int]:
        """Ids of the pools that recorded anything."""
        return sorted({a.pool for a in self.admissions} | {g.pool for g in self.decode_groups})

    def timeline(self, around: int | None = None, before: int = 12, after: int = 4) -> str:
        """Grants one per line, a compact view for failure messages: those
        just before and after log position ``around`` (default: the last ones)."""
        grants = self.grants()
        if around is None:
            around = seq_of(grants[-1].granted) + 1 if grants else 0
        at = next((i for i, p in enumerate(grants) if seq_of(p.granted) >= around), len(grants))
        lines = [f"  {p.granted}: {p.describe()}" for p in grants[max(0, at - before):at + after]]
        return "\n".join(lines)

    def __repr__(self) -> str:
        built = self._built()
        return (f"ScheduleLog(permits={len(built['permits'])}, admissions={len(built['admissions'])}, "
                f"decode_groups={len(built['decode_groups'])}, requests={len(built['requests'])}, "
                f"recording={self.recording})")


def _event(raw: tuple[Any, ...]) -> ScheduleEvent:
    seq, time_ns, kind, subject, pool, slot, rows, sessions, slots, what, detail = raw
    return ScheduleEvent(seq, time_ns, kind, subject, pool, slot, rows, tuple(sessions), tuple(slots), what, detail)


def _build(events: list[ScheduleEvent]) -> dict[str, Any]:
    permits: dict[int, PermitRecord] = {}
    admissions: list[AdmissionRecord] = []
    by_ticket: dict[tuple[int, int], AdmissionRecord] = {}
    holding: dict[tuple[int, int], AdmissionRecord] = {}  # (pool, slot) -> its current admission
    groups: list[DecodeGroupRecord] = []
    cancellations: list[CancellationRecord] = []
    requests: dict[int, RequestRecord] = {}
    record: AdmissionRecord | None
    for e in sorted(events, key=lambda e: e.seq):
        at = e.moment
        if e.kind == "permit_requested":
            permits[e.subject] = PermitRecord(e.subject, e.what, e.sessions, at,
                                              rows=e.rows if e.what == "decode" else None)
        elif e.kind in ("permit_granted", "permit_released", "permit_refused", "prefill_chunk"):
            p = permits.get(e.subject)
            if p is None:
                continue
            if e.kind == "permit_granted":
                p.granted = at
            elif e.kind == "permit_released":
                p.released = at
            elif e.kind == "permit_refused":
                p.refused, p.refused_at = e.what, at
            else:
                p.rows, p.contended = e.rows, e.what == "contended"
        elif e.kind == "admission_requested":
            record = AdmissionRecord(e.pool, e.subject, at)
            admissions.append(record)
            by_ticket[(e.pool, e.subject)] = record
        elif e.kind == "admitted":
            record = by_ticket.get((e.pool, e.subject))
            if record is None:
                continue
            record.admitted, record.slot = at, e.slot
            holding[(e.pool, e.slot)] = record
        elif e.kind == "admission_refused":
            record = by_ticket.get((e.pool, e.subject)) if e.subject else None
            if record is None:
                record = AdmissionRecord(e.pool, e.subject, None)
                admissions.append(record)
            record.refused, record.refused_at = e.what, at
        elif e.kind == "leased":
            record = holding.get((e.pool, e.slot))
            if record is not None:
                record.session = e.sessions[0] if e.sessions else None
                record.reused_tokens = e.rows
        elif e.kind == "lease_released":
            record = holding.pop((e.pool, e.slot), None)
            if record is None:
                record = AdmissionRecord(e.pool, 0, None, slot=e.slot)  # a lease from before the recording
                admissions.append(record)
            if record.released is not None:
                record.release_state = "released twice"
            record.released, record.release_state = at, record.release_state or e.what
        elif e.kind == "decode_group":
            groups.append(DecodeGroupRecord(e.pool, e.slots, e.sessions, at))
        elif e.kind == "cancelled":
            cancellations.append(CancellationRecord(e.what, at, e.pool, None if e.slot < 0 else e.slot,
                                                    e.sessions[0] if e.sessions else None))
        elif e.kind == "note":
            if e.what == "request_started":
                requests[e.subject] = RequestRecord(e.subject, e.pool, at)
            elif e.what in ("request_admitted", "request_ended"):
                request = requests.get(e.subject)
                if request is None:
                    continue
                if e.what == "request_admitted":
                    request.admitted, request.slot = at, e.slot
                else:
                    request.ends.append((at, e.detail))
    # Admissions by pool, then arrival (tickets count up within a pool).
    admissions.sort(key=lambda a: (a.pool, a.requested.seq if a.requested else (a.ended.seq if a.ended else 0)))
    return {
        "permits": sorted(permits.values(), key=lambda p: p.requested.seq),
        "admissions": admissions,
        "decode_groups": groups,
        "cancellations": cancellations,
        "requests": sorted(requests.values(), key=lambda r: r.started.seq),
    }


@contextlib.contextmanager
def record_schedule(engine: Engine | Any) -> Iterator[ScheduleLog]:
    """Record ``engine``'s scheduling (and that of every pool on it) while the block runs.

    Yields a :class:`ScheduleLog` that is live inside the block and frozen
    at its end. Raises ``ValueError`` if the engine is already recording.
    """
    core: Any = engine._core if hasattr(engine, "_core") else engine  # (a muser.Engine or its core)
    recorder = core.schedule_recorder
    recorder.start()
    log = ScheduleLog()
    log._recorder = recorder
    try:
        yield log
    finally:
        raw = recorder.stop()
        log._frozen = [_event(e) for e in raw]
        log._dropped = recorder.dropped
        log._recorder = None
