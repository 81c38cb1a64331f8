"""muser.testing's checkers pass a fair schedule and fail, with a message that
says what happened, on each deliberately unfair scheduler injected into a
simulation that records the same events as muser's core."""

from __future__ import annotations

import re

import pytest

from muser.testing import (
    ADMISSION_PASS_BOUND,
    ScheduleEvent,
    ScheduleLog,
    check_all,
    check_bounded_decode_wait,
    check_each_request_ended_once,
    check_no_prefill_while_decoder_waits,
    check_no_starvation,
    check_prefill_chunks,
    check_rotation,
)
from tests.unit.simulated_scheduler import (
    BIG_CHUNKS,
    FAIR,
    FAVOURITE,
    LIFO_ADMISSION,
    LIFO_DECODES,
    PREFILL_FIRST,
    Decoder,
    Prefiller,
    Simulation,
)

DECODERS = [Decoder(1, 0, 6), Decoder(2, 0, 6), Decoder(3, 1, 6), Decoder(4, 2, 6)]
PREFILLERS = [Prefiller(9, 1, 700)]


def test_a_fair_scheduler_passes_every_checker():
    log = Simulation(FAIR).run(DECODERS, PREFILLERS)
    assert sum(p.kind == "decode" for p in log.permits) == 24
    check_all(log)


def test_a_single_decoder_beside_a_long_prefill_gets_short_chunks_from_a_fair_scheduler():
    log = Simulation(FAIR).run([Decoder(1, 0, 8)], [Prefiller(9, 0, 1400)])
    rows = [p.rows for p in log.grants() if p.kind == "prefill"]
    assert 64 in rows and max(rows) <= 512
    check_all(log)


def test_serving_the_latest_decoder_first_breaks_the_rotation():
    log = Simulation(LIFO_DECODES).run(DECODERS)
    with pytest.raises(AssertionError) as failure:
        check_rotation(log)
    message = str(failure.value)
    assert message.startswith("decode rotation broken: a decoder was served out of turn")
    assert re.search(r"the sessions waiting were \[[\d, ]+\] and the last one served was \d+, so the rotation "
                     r"selects \d+", message), message
    assert "grants around #" in message


def test_a_favourite_session_makes_another_decoder_wait_behind_it_twice():
    log = Simulation(FAVOURITE).run(DECODERS)
    with pytest.raises(AssertionError, match="another decoder had two turns ahead of it") as failure:
        check_bounded_decode_wait(log)
    assert re.search(r"session 1 had the turn \d+ times", str(failure.value))
    with pytest.raises(AssertionError, match="rotation broken"):
        check_rotation(log)


def test_prefill_ahead_of_waiting_decoders_is_reported_with_who_waited():
    log = Simulation(PREFILL_FIRST).run(DECODERS, PREFILLERS)
    with pytest.raises(AssertionError) as failure:
        check_no_prefill_while_decoder_waits(log)
    message = str(failure.value)
    assert message.startswith("prefill ran while a decoder waited")
    assert re.search(r"prefill permit \d+ \(session 9, \d+ rows\) was granted while sessions? [\d, ]+ waited", message)
    with pytest.raises(AssertionError, match="a prefill ran while it waited"):
        check_bounded_decode_wait(log)


def test_full_size_chunks_during_a_generation_are_reported():
    log = Simulation(BIG_CHUNKS).run([Decoder(1, 0, 8)], [Prefiller(9, 0, 1400)])
    check_rotation(log)
    with pytest.raises(AssertionError) as failure:
        check_prefill_chunks(log)
    message = str(failure.value)
    assert message.startswith("a prefill chunk was not cut short while a generation was decoding")
    assert "ran 512 rows while session 1 was mid-way through its decode loop" in message
    assert "at most 64 rows" in message


def test_admitting_the_latest_caller_first_starves_the_earliest():
    decoders = [Decoder(s, 0, 3) for s in range(1, 9)]  # 8 callers, 4 slots
    log = Simulation(LIFO_ADMISSION, slots=4).run(decoders)
    check_rotation(log)
    with pytest.raises(AssertionError) as failure:
        check_no_starvation(log)
    message = str(failure.value)
    assert message.startswith("a caller waiting for a slot was starved: later arrivals were admitted first")
    assert re.search(r"pool 1 ticket \d+ arrived at #\d+ .* later arrival\(s\) got a slot first \(tickets [\d, ]+\)"
                     rf"\. The bound is {ADMISSION_PASS_BOUND}\.", message), message
    check_no_starvation(log, max_passes=8)  # a looser documented bound would accept it


def test_a_permit_that_is_never_released_is_reported():
    fair = Simulation(FAIR).run(DECODERS)
    victim = fair.grants()[5].id
    log = Simulation(FAIR, drop_release_of=victim).run(DECODERS)
    with pytest.raises(AssertionError, match=rf"a permit was never released\ndecode permit {victim} "):
        check_each_request_ended_once(log)


def _note(seq: int, what: str, subject: int, detail: str = "") -> ScheduleEvent:
    return ScheduleEvent(seq, seq * 1000, "note", subject, 7, -1, 0, (), (), what, detail)


def test_a_request_that_ends_twice_or_never_is_reported_with_its_ends():
    twice = ScheduleLog.from_events([_note(0, "request_started", 1), _note(1, "request_ended", 1, "stop"),
                                     _note(2, "request_ended", 1, "Cancelled")])
    with pytest.raises(AssertionError) as failure:
        check_each_request_ended_once(twice)
    assert "request 1 (pool 7) started at #0 (t=0.0 ms) and ended 2 times: 'stop' at #1" in str(failure.value)
    never = ScheduleLog.from_events([_note(0, "request_started", 3)])
    with pytest.raises(AssertionError, match="ended 0 times: never"):
        check_each_request_ended_once(never)


def test_a_lease_released_twice_or_never_is_reported():
    def ev(seq, kind, subject=0, slot=-1):
        return ScheduleEvent(seq, seq, kind, subject, 2, slot, 0, (), (), "healthy", "")

    never = ScheduleLog.from_events([ev(0, "admission_requested", 1), ev(1, "admitted", 1, 0)])
    with pytest.raises(AssertionError, match="a lease was never released\npool 2 ticket 1 got slot 0"):
        check_each_request_ended_once(never)
    unanswered = ScheduleLog.from_events([ev(0, "admission_requested", 1)])
    with pytest.raises(AssertionError, match="never got an answer"):
        check_each_request_ended_once(unanswered)


def test_a_truncated_log_is_refused_rather_than_judged():
    log = ScheduleLog.from_events([], dropped=3)
    with pytest.raises(AssertionError, match="overflowed \\(3 events dropped\\)"):
        check_rotation(log)
