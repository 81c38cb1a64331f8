"""pytest fixtures of :mod:`muser.testing`, registered through the ``pytest11``
entry point when muser is installed (nothing to import in a conftest).

- ``muser_null_engine``: a fresh :func:`muser.testing.null_engine` (1 ms per
  forward, 20 us per prompt row) for each test.
- ``muser_pool``: a 4-slot :class:`muser.SlotPool` on that engine.
- ``muser_schedule_log``: that engine's schedule, recorded for the whole test
  (a live :class:`muser.testing.ScheduleLog`; pass it to the checkers).

They are function-scoped; with Hypothesis, build engines inside the test
(``null_engine()`` costs about a millisecond) rather than sharing these
across examples.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from muser.engine import Engine
    from muser.pool import SlotPool
    from muser.testing.schedule_log import ScheduleLog


@pytest.fixture
def muser_null_engine() -> Engine:
    """A fresh null engine (muser.testing.null_engine: 1 ms per forward, 20 us per prompt row)."""
    from muser.testing import null_engine

    return null_engine(step_seconds=0.001, prefill_seconds_per_row=0.00002)


@pytest.fixture
def muser_pool(muser_null_engine: Engine) -> SlotPool:
    """A 4-slot muser.SlotPool on muser_null_engine."""
    import muser

    return muser.SlotPool(muser_null_engine, slots=4)


@pytest.fixture
def muser_schedule_log(muser_null_engine: Engine) -> Iterator[ScheduleLog]:
    """muser_null_engine's schedule, recorded for the whole test (a live ScheduleLog)."""
    with muser_null_engine.record_schedule() as log:
        yield log
