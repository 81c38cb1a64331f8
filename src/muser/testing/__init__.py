"""Tools to test scheduling fairness under your own workloads, with pytest and Hypothesis.

muser's scheduler promises that decoders take turns in a fixed rotation, that
a long prompt's prefill never stalls running generations, that waits are
bounded and that nobody starves. This module lets an application check those
promises under its own workload shapes::

    import muser
    from muser.testing import null_engine, run_workload, check_all

    engine = null_engine(step_seconds=0.002, prefill_seconds_per_row=0.0001)
    pool = muser.SlotPool(engine, slots=4)
    with engine.record_schedule() as log:
        run_workload(pool, my_workload)
    check_all(log)   # AssertionError with an explanation if a rule was broken

- :func:`null_engine`: the real scheduler, sessions, pool and batcher on a
  backend that only sleeps, from a tiny model written on the fly (no download).
- ``engine.record_schedule()`` / :func:`record_schedule`: a :class:`ScheduleLog`
  of every permit, admission, decode group, cancellation and request.
- Checkers (:mod:`muser.testing.checks`): :func:`check_rotation`,
  :func:`check_no_prefill_while_decoder_waits`, :func:`check_bounded_decode_wait`,
  :func:`check_no_starvation`, :func:`check_prefill_chunks`,
  :func:`check_each_request_ended_once`, and :func:`check_all`.
- Workloads: :class:`Workload`, :class:`RequestSpec`, :func:`run_workload`;
  Hypothesis strategies in :mod:`muser.testing.strategies` (imported on its
  own; needs ``hypothesis``).
- pytest fixtures (registered automatically when muser is installed):
  ``muser_null_engine``, ``muser_pool`` and ``muser_schedule_log``.

Importing this module needs neither pytest nor Hypothesis.
"""

from __future__ import annotations

from muser.testing.checks import (
    ADMISSION_PASS_BOUND,
    PREFILL_CHUNK_ROWS,
    PREFILL_CHUNK_ROWS_CONTENDED,
    check_all,
    check_bounded_decode_wait,
    check_each_request_ended_once,
    check_no_prefill_while_decoder_waits,
    check_no_starvation,
    check_prefill_chunks,
    check_rotation,
)
from muser.testing.engines import null_engine
from muser.testing.null_model import null_model_path
from muser.testing.schedule_log import (
    AdmissionRecord,
    CancellationRecord,
    DecodeGroupRecord,
    Moment,
    PermitRecord,
    RequestRecord,
    ScheduleEvent,
    ScheduleLog,
    record_schedule,
)
from muser.testing.workload import RequestResult, RequestSpec, Workload, prompt_tokens, run_workload

__all__ = [
    "ADMISSION_PASS_BOUND",
    "PREFILL_CHUNK_ROWS",
    "PREFILL_CHUNK_ROWS_CONTENDED",
    "AdmissionRecord",
    "CancellationRecord",
    "DecodeGroupRecord",
    "Moment",
    "PermitRecord",
    "RequestRecord",
    "RequestResult",
    "RequestSpec",
    "ScheduleEvent",
    "ScheduleLog",
    "Workload",
    "check_all",
    "check_bounded_decode_wait",
    "check_each_request_ended_once",
    "check_no_prefill_while_decoder_waits",
    "check_no_starvation",
    "check_prefill_chunks",
    "check_rotation",
    "null_engine",
    "null_model_path",
    "prompt_tokens",
    "record_schedule",
    "run_workload",
]
