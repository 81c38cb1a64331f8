"""Fairness checkers: each takes a :class:`~muser.testing.ScheduleLog` and raises
``AssertionError`` with a readable explanation when the schedule broke a rule.

The rules are muser's documented scheduling guarantees (DESIGN.md, "Engine
level" and "Serving level"), re-derived here from the log alone: the
checkers never ask the scheduler what it meant to do, so a scheduler that
breaks a rule cannot hide it. Run them after the workload has finished
(every request ended); they work on any log, including logs built with
:meth:`ScheduleLog.from_events`.

- :func:`check_rotation`: each decode grant goes to the group holding the
  next waiting session after the last one served, wrapping to the smallest.
- :func:`check_no_prefill_while_decoder_waits`: no prefill chunk is granted
  while any decoder waits.
- :func:`check_bounded_decode_wait`: while a decoder waits, every other
  decoder is served at most once and no prefill runs, so its wait is bounded
  by the decoders ahead of it (plus the work in progress when it arrived).
- :func:`check_no_starvation`: no caller waiting for a slot is passed over by
  later arrivals more than :data:`ADMISSION_PASS_BOUND` times, and no decoder
  is left waiting while others keep being served.
- :func:`check_prefill_chunks`: chunks are at most 512 rows, and at most 64
  while a generation is mid-way through its decode loop.
- :func:`check_each_request_ended_once`: every request, admission, lease and
  permit ended exactly once.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Iterator

from muser import _core
from muser.testing.schedule_log import AdmissionRecord, Moment, PermitRecord, ScheduleLog, moment_of, seq_of

__all__ = [
    "ADMISSION_PASS_BOUND",
    "PREFILL_CHUNK_ROWS",
    "PREFILL_CHUNK_ROWS_CONTENDED",
    "STARVATION_GRANTS",
    "check_all",
    "check_bounded_decode_wait",
    "check_each_request_ended_once",
    "check_no_prefill_while_decoder_waits",
    "check_no_starvation",
    "check_prefill_chunks",
    "check_rotation",
]

PREFILL_CHUNK_ROWS = 512
"""Rows of a prefill chunk while no generation is decoding."""
PREFILL_CHUNK_ROWS_CONTENDED = 64
"""Rows of a prefill chunk once a generation is decoding (or waits to)."""
ADMISSION_PASS_BOUND = _core.ADMISSION_MAX_PASSED_OVER
"""How many later arrivals may be admitted before a waiting caller. Slot
admission serves the longest cached prefix first with aging: nobody is
passed over more than this many times (the core's constant)."""
STARVATION_GRANTS = 64
"""A decoder still waiting after this many grants to others counts as starved."""


def _fail(rule: str, detail: str, log: ScheduleLog | None = None, around: Moment | None = None) -> None:
    message = f"{rule}\n{detail}"
    if log is not None:
        nearby = log.timeline(around=around.seq if around is not None else None)
        if nearby:
            message += f"\ngrants around {around}:\n{nearby}" if around is not None else f"\nlast grants:\n{nearby}"
    raise AssertionError(message)


def _complete(log: ScheduleLog) -> None:
    if log.dropped:
        raise AssertionError(f"the schedule log overflowed ({log.dropped} events dropped); record a shorter workload")


def _grants_with_waiting(log: ScheduleLog) -> Iterator[tuple[PermitRecord, list[PermitRecord]]]:
    """Each grant, in order, with the decode permits waiting at that moment (itself included).

    A sweep over the permits' request and end moments: a decode permit waits
    from its request until it is granted or refused.
    """
    moments: list[tuple[int, int, PermitRecord]] = []
    for p in log.permits:
        if p.kind == "decode":
            moments.append((p.requested.seq, 0, p))
        if p.ended is not None:
            moments.append((p.ended.seq, 1, p))
    moments.sort(key=lambda m: (m[0], m[1]))
    waiting: dict[int, PermitRecord] = {}
    for _, is_end, p in moments:
        if not is_end:
            waiting[p.id] = p
            continue
        if p.granted is not None and p.ended is p.granted:
            yield p, list(waiting.values())
        waiting.pop(p.id, None)


def _next_in_rotation(waiting: Iterable[int], cursor: int | None) -> int | None:
    ids = sorted(set(waiting))
    if not ids:
        return None
    if cursor is not None:
        later = [i for i in ids if i > cursor]
        if later:
            return later[0]
    return ids[0]


def _cursor_after(group: Iterable[int], selected: int, waiting: Iterable[int]) -> int:
    # The documented rule: walk everyone waiting in rotation order from the
    # selected member; the cursor stops at the last group member before the
    # first waiter outside the group (who is then next).
    members = set(group)
    ids = sorted(set(waiting) | members)
    order = [i for i in ids if i >= selected] + [i for i in ids if i < selected]
    cursor = selected
    for i in order:
        if i not in members:
            break
        cursor = i
    return cursor


def _first_after(ids: Iterable[int], cursor: int | None) -> int:
    ordered = sorted(ids)
    later = [i for i in ordered if cursor is not None and i > cursor]
    return later[0] if later else ordered[0]


def _rotation_turns(log: ScheduleLog) -> Iterator[tuple[PermitRecord, set[int], int | None, int]]:
    """Each decode grant with the sessions waiting, the cursor before it, and
    whose turn it was: the group's member first in rotation order after the
    cursor (for a fair grant, the session the rotation selected; the others
    ride along in the same weight pass)."""
    cursor: int | None = None
    for p, waiting_permits in _grants_with_waiting(log):
        if p.kind != "decode":
            continue
        waiting = {s for q in waiting_permits for s in q.sessions} | set(p.sessions)
        turn = _first_after(p.sessions, cursor)
        yield p, waiting, cursor, turn
        cursor = _cursor_after(p.sessions, turn, waiting)


def _sessions(ids: Iterable[int]) -> str:
    ids = sorted(set(ids))
    return ("session " if len(ids) == 1 else "sessions ") + ", ".join(map(str, ids))


def check_rotation(log: ScheduleLog) -> None:
    """Each decode grant follows the cyclic rotation among waiting decoders.

    The rotation selects the next waiting session after the last one served
    (the cursor), wrapping to the smallest id; a decode group is granted when
    it holds the selected session, and the cursor then moves along the
    rotation over the group's members, stopping before the first waiting
    session outside the group (so that one is next).
    """
    _complete(log)
    for p, waiting, cursor, _ in _rotation_turns(log):
        expected = _next_in_rotation(waiting, cursor)
        if cursor is not None and expected not in p.sessions:
            _fail(
                "decode rotation broken: a decoder was served out of turn",
                f"at {p.granted} the accelerator went to {p.describe()}, but the sessions waiting were "
                f"{sorted(waiting)} and the last one served was {cursor}, so the rotation selects {expected} "
                f"(the next waiting id after {cursor}, wrapping to the smallest).",
                log, p.granted,
            )


def check_no_prefill_while_decoder_waits(log: ScheduleLog) -> None:
    """No prefill chunk is granted while a decoder waits for the accelerator."""
    _complete(log)
    for p, waiting in _grants_with_waiting(log):
        if p.kind != "prefill":
            continue
        if waiting:
            first = min(waiting, key=lambda q: q.requested.seq)
            _fail(
                "prefill ran while a decoder waited",
                f"at {p.granted} {p.describe()} was granted while {_sessions(s for q in waiting for s in q.sessions)} "
                f"waited to decode ({first.describe()} since {first.requested}). A waiting decoder must be served "
                "before any prefill chunk.",
                log, p.granted,
            )


def check_bounded_decode_wait(log: ScheduleLog, max_grants_ahead: int | None = None) -> None:
    """A decoder waits only for the decoders ahead of it.

    While a decode permit waits (requested to granted), no prefill chunk is
    granted and no other session gets the turn twice: every decoder ahead of
    it in the rotation gets at most one turn, so the wait is bounded by the
    number of decoders ahead (plus the work in progress when it arrived).
    A turn is a grant's first member in rotation order; the other members of
    a decode group ride along in the same weight pass. With
    ``max_grants_ahead``, also at most that many grants happen during any one
    wait.
    """
    _complete(log)
    turn_of = {p.id: turn for p, _, _, turn in _rotation_turns(log)}
    grants = log.grants()
    grant_seqs = [seq_of(g.granted) for g in grants]
    for q in (p for p in log.permits if p.kind == "decode" and p.granted is not None):
        during = grants[bisect.bisect_right(grant_seqs, seq_of(q.requested)):bisect.bisect_left(grant_seqs, seq_of(q.granted))]
        prefills = [g for g in during if g.kind == "prefill"]
        if prefills:
            _fail(
                "a decoder's wait was not bounded: a prefill ran while it waited",
                f"{q.describe()} waited from {q.requested} to {q.granted}; meanwhile {prefills[0].describe()} "
                f"was granted at {prefills[0].granted}.",
                log, prefills[0].granted,
            )
        turns: dict[int, list[Moment]] = defaultdict(list)
        for g in during:
            if g.id in turn_of:
                turns[turn_of[g.id]].append(moment_of(g.granted))
        for s, moments in sorted(turns.items()):
            if len(moments) > 1 and s not in q.sessions:
                _fail(
                    "a decoder's wait was not bounded: another decoder had two turns ahead of it",
                    f"{q.describe()} waited from {q.requested} to {q.granted}; meanwhile session {s} had the turn "
                    f"{len(moments)} times (at {', '.join(map(str, moments[:4]))}"
                    f"{', ...' if len(moments) > 4 else ''}). The rotation gives every other "
                    "waiting decoder at most one turn before it.",
                    log, moments[1],
                )
        if max_grants_ahead is not None and len(during) > max_grants_ahead:
            _fail(
                "a decoder's wait was not bounded",
                f"{q.describe()} waited from {q.requested} to {q.granted} through {len(during)} grants to "
                f"others; the bound is {max_grants_ahead}.",
                log, q.granted,
            )


def check_no_starvation(log: ScheduleLog, max_passes: int = ADMISSION_PASS_BOUND,
                        starvation_grants: int = STARVATION_GRANTS) -> None:
    """No waiter is passed over more than the documented bound.

    For slots: a caller waiting for admission sees at most ``max_passes``
    later arrivals at the same pool admitted before it (the aging bound of
    cache-aware admission). For the accelerator: no decoder is still waiting at the end
    of the log after ``starvation_grants`` grants went to others.
    """
    _complete(log)
    by_pool: dict[int, list[AdmissionRecord]] = defaultdict(list)
    for a in log.admissions:
        if a.requested is not None:
            by_pool[a.pool].append(a)
    for pool, queue in by_pool.items():
        admitted = sorted((a for a in queue if a.admitted is not None), key=lambda a: seq_of(a.admitted))
        admitted_seqs = [seq_of(a.admitted) for a in admitted]
        for waiter in queue:
            until = waiter.ended.seq if waiter.ended is not None else float("inf")
            window = admitted[bisect.bisect_right(admitted_seqs, seq_of(waiter.requested)):
                              bisect.bisect_left(admitted_seqs, until)]
            passed = [a for a in window if a.ticket > waiter.ticket]
            if len(passed) > max_passes:
                _fail(
                    "a caller waiting for a slot was starved: later arrivals were admitted first",
                    f"{waiter.describe()} arrived at {waiter.requested} and waited until "
                    f"{waiter.ended if waiter.ended else 'the end of the log'}; meanwhile {len(passed)} later "
                    f"arrival(s) got a slot first (tickets {', '.join(str(a.ticket) for a in passed[:8])}). "
                    f"The bound is {max_passes}.",
                )
    grant_seqs = [seq_of(g.granted) for g in log.grants()]
    for q in log.permits:
        if q.kind != "decode" or q.ended is not None:
            continue
        after = grant_seqs[bisect.bisect_right(grant_seqs, q.requested.seq):]
        if len(after) >= starvation_grants:
            _fail(
                "a decoder was starved",
                f"{q.describe()} requested at {q.requested} was never granted, while {len(after)} permits went "
                "to others after it arrived.",
                log, q.requested,
            )


def check_prefill_chunks(log: ScheduleLog) -> None:
    """Prefill chunks are at most 512 rows, and at most 64 while a generation is decoding.

    "Decoding" is judged from the log: a leased session whose decode grants
    (within one lease) fall on both sides of the chunk, the earlier one after
    the previous prefill permit, was mid-way through its decode loop when the
    chunk was granted, so the chunk must be short enough not to stall it.
    """
    _complete(log)
    leases: dict[int, list[tuple[int, float]]] = defaultdict(list)  # session -> [(from seq, to seq)]
    for a in log.admissions:
        if a.session is not None and a.admitted is not None:
            leases[a.session].append((a.admitted.seq, a.released.seq if a.released else float("inf")))
    decode_grants: dict[int, list[int]] = defaultdict(list)
    grants = log.grants()
    for g in grants:
        if g.kind == "decode":
            for s in g.sessions:
                decode_grants[s].append(seq_of(g.granted))
    previous_prefill = -1
    for chunk in grants:
        if chunk.kind != "prefill":
            continue
        if chunk.rows is not None and chunk.rows > PREFILL_CHUNK_ROWS:
            _fail("a prefill chunk was too large",
                  f"{chunk.describe()} at {chunk.granted}: at most {PREFILL_CHUNK_ROWS} rows per chunk.", log, chunk.granted)
        at = seq_of(chunk.granted)
        if chunk.rows is not None and chunk.rows > PREFILL_CHUNK_ROWS_CONTENDED:
            for session, spans in leases.items():
                for start, end in spans:
                    if not start < at < end:
                        continue
                    seqs = [s for s in decode_grants.get(session, ()) if start < s < end]
                    before = [s for s in seqs if previous_prefill < s < at]
                    after = [s for s in seqs if s > at]
                    if before and after:
                        _fail(
                            "a prefill chunk was not cut short while a generation was decoding",
                            f"{chunk.describe()} at {chunk.granted} ran {chunk.rows} rows while session {session} "
                            f"was mid-way through its decode loop (decoded at #{before[-1]} and again at "
                            f"#{after[0]}, one lease). While decoders are active, chunks are at most "
                            f"{PREFILL_CHUNK_ROWS_CONTENDED} rows.",
                            log, chunk.granted,
                        )
        previous_prefill = at


def check_each_request_ended_once(log: ScheduleLog) -> None:
    """Every request, admission, lease and permit ended exactly once.

    - each generation request that started ended once (a finish reason or a typed error);
    - each caller that queued for a slot was admitted or refused, and each
      lease was released exactly once;
    - each permit requested was granted or refused, and each grant released once.
    """
    _complete(log)
    for r in log.requests:
        if len(r.ends) != 1:
            ends = "; ".join(f"{outcome!r} at {at}" for at, outcome in r.ends) or "never"
            _fail("a request did not end exactly once",
                  f"request {r.id} (pool {r.pool}) started at {r.started} and ended {len(r.ends)} times: {ends}.")
    for a in log.admissions:
        if a.requested is not None and a.ended is None:
            _fail("a caller waiting for a slot never got an answer",
                  f"{a.describe()} queued at {a.requested} and was neither admitted nor refused.")
        if a.admitted is not None and a.released is None:
            _fail("a lease was never released",
                  f"{a.describe()} got slot {a.slot} at {a.admitted} and never gave it back.")
        if a.release_state == "released twice":
            _fail("a lease was released twice", f"{a.describe()} (slot {a.slot}) was released twice.")
    for p in log.permits:
        if p.ended is None:
            _fail("a permit request never ended",
                  f"{p.describe()} requested at {p.requested} was neither granted nor refused.", log, p.requested)
        if p.granted is not None and p.released is None:
            _fail("a permit was never released",
                  f"{p.describe()} granted at {p.granted} still holds the accelerator.", log, p.granted)


def check_all(log: ScheduleLog) -> None:
    """Every checker above, in the order a failure is easiest to read."""
    check_each_request_ended_once(log)
    check_no_prefill_while_decoder_waits(log)
    check_rotation(log)
    check_bounded_decode_wait(log)
    check_no_starvation(log)
    check_prefill_chunks(log)
