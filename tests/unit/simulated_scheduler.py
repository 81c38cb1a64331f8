"""A step-by-step scheduler simulation that writes the same events as muser's
core, with the scheduling policy injected: the fair rules, or deliberately
unfair ones, so tests can check that muser.testing's checkers catch each kind
of unfairness with a clear message.

Each decoder holds a lease on a slot of pool 1 and wants `steps` decode
permits; after each one it "thinks" through one more grant before asking
again (as a generation samples between steps), which is when a prefill chunk
can slip in. Each prefiller wants `rows` prompt rows in chunks. At every step
the policy picks which waiting permit runs next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from muser.testing import ScheduleEvent, ScheduleLog


@dataclass
class Decoder:
    session: int
    arrival: int
    steps: int


@dataclass
class Prefiller:
    session: int
    arrival: int
    rows: int


@dataclass
class Waiting:
    permit: int
    kind: str
    session: int
    arrived: int  # seq of its request


@dataclass
class Policy:
    """pick(waiting, cursor) -> the Waiting to grant; chunk(decoders_active, remaining) -> rows."""

    pick: Callable[[list[Waiting], int | None], Waiting]
    chunk: Callable[[bool, int], int]
    admit: Callable[[list[int]], int] = lambda queue: queue[0]  # which queued ticket gets a free slot


def _rotation(waiting: list[Waiting], cursor: int | None) -> Waiting:
    decodes = sorted((w for w in waiting if w.kind == "decode"), key=lambda w: w.session)
    if decodes:
        later = [w for w in decodes if cursor is not None and w.session > cursor]
        return later[0] if later else decodes[0]
    return min(waiting, key=lambda w: w.arrived)


FAIR = Policy(pick=_rotation, chunk=lambda active, remaining: min(remaining, 64 if active else 512))
# A decoder arriving last is served first.
LIFO_DECODES = Policy(
    pick=lambda waiting, cursor: max(waiting, key=lambda w: (w.kind == "decode", w.arrived)),
    chunk=FAIR.chunk,
)
# Prefill chunks jump ahead of waiting decoders.
PREFILL_FIRST = Policy(
    pick=lambda waiting, cursor: min(waiting, key=lambda w: (w.kind != "prefill", w.arrived)),
    chunk=FAIR.chunk,
)
# Session 1 is everyone's favourite: it is served whenever it waits.
FAVOURITE = Policy(
    pick=lambda waiting, cursor: next((w for w in waiting if w.session == 1), _rotation(waiting, cursor)),
    chunk=FAIR.chunk,
)
# Prefill always in 512-row chunks, even while decoders are mid-generation.
BIG_CHUNKS = Policy(pick=_rotation, chunk=lambda active, remaining: min(remaining, 512))
# Slots go to the latest caller first.
LIFO_ADMISSION = Policy(pick=_rotation, chunk=FAIR.chunk, admit=lambda queue: queue[-1])


@dataclass
class Simulation:
    policy: Policy
    slots: int = 4
    events: list[ScheduleEvent] = field(default_factory=list)
    drop_release_of: int | None = None  # a buggy scheduler that never releases this permit

    def emit(self, kind: str, subject: int = 0, pool: int = 0, slot: int = -1, rows: int = 0,
             sessions: tuple[int, ...] = (), what: str = "", detail: str = "") -> int:
        seq = len(self.events)
        self.events.append(ScheduleEvent(seq, seq * 1_000_000, kind, subject, pool, slot, rows, sessions, (),
                                         what, detail))
        return seq

    def run(self, decoders: list[Decoder], prefillers: list[Prefiller] = ()) -> ScheduleLog:
        permit_ids = iter(range(1, 10**6))
        remaining_steps = {d.session: d.steps for d in decoders}
        remaining_rows = {p.session: p.rows for p in prefillers}
        waiting: list[Waiting] = []
        queue: list[tuple[int, Decoder]] = []  # (ticket, decoder) waiting for a slot
        free_slots = list(range(self.slots))
        slot_of: dict[int, int] = {}
        tickets = iter(range(1, 10**6))
        cursor: int | None = None
        step = 0
        thinking: list[tuple[str, int]] = []  # re-requests issued after the next grant

        def request(kind: str, session: int) -> None:
            permit = next(permit_ids)
            seq = self.emit("permit_requested", permit, sessions=(session,), what=kind,
                            rows=1 if kind == "decode" else 0)
            waiting.append(Waiting(permit, kind, session, seq))

        def admit_waiters() -> None:
            while queue and free_slots:
                ticket = self.policy.admit([t for t, _ in queue])
                decoder = next(d for t, d in queue if t == ticket)
                queue[:] = [(t, d) for t, d in queue if t != ticket]
                slot = free_slots.pop(0)
                slot_of[decoder.session] = slot
                self.emit("admitted", ticket, pool=1, slot=slot)
                self.emit("leased", pool=1, slot=slot, sessions=(decoder.session,))
                request("decode", decoder.session)

        while True:
            for d in decoders:
                if d.arrival == step:
                    ticket = next(tickets)
                    self.emit("admission_requested", ticket, pool=1)
                    queue.append((ticket, d))
            for p in prefillers:
                if p.arrival == step:
                    request("prefill", p.session)
            admit_waiters()
            if not waiting and thinking:
                for kind, session in thinking:
                    request(kind, session)
                thinking.clear()
            if not waiting:
                if all(v == 0 for v in remaining_steps.values()) and all(v == 0 for v in remaining_rows.values()) \
                        and step > max([d.arrival for d in decoders] + [p.arrival for p in prefillers]):
                    break
                step += 1
                continue
            chosen = self.policy.pick(waiting, cursor)
            waiting.remove(chosen)
            self.emit("permit_granted", chosen.permit, rows=1 if chosen.kind == "decode" else 0)
            if chosen.kind == "decode":
                cursor = chosen.session
                remaining_steps[chosen.session] -= 1
            else:
                active = any(v > 0 for s, v in remaining_steps.items() if s in slot_of)
                rows = self.policy.chunk(active, remaining_rows[chosen.session])
                remaining_rows[chosen.session] -= rows
                self.emit("prefill_chunk", chosen.permit, rows=rows, what="contended" if rows <= 64 else "idle")
            if chosen.permit != self.drop_release_of:
                self.emit("permit_released", chosen.permit)
            for kind, session in thinking:
                request(kind, session)
            thinking.clear()
            if chosen.kind == "decode":
                if remaining_steps[chosen.session] > 0:
                    thinking.append(("decode", chosen.session))
                else:
                    slot = slot_of.pop(chosen.session)
                    self.emit("lease_released", pool=1, slot=slot, what="healthy")
                    free_slots.append(slot)
            elif remaining_rows[chosen.session] > 0:
                request("prefill", chosen.session)
            step += 1
        return ScheduleLog.from_events(self.events)
