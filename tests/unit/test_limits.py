"""The scheduling and batching constants live in one C++ header (core/limits.h),
exported by _core; the Python defaults are those values, not copies."""

from __future__ import annotations

import inspect

import muser
from muser import _core


def test_core_exports_the_limits():
    assert _core.MAX_DECODE_GROUP_ROWS == _core.MAX_SLOTS == 4
    assert _core.PREFILL_CHUNK_ROWS == _core.MAX_STEP_ROWS == 512
    assert _core.PREFILL_CHUNK_ROWS_CONTENDED == 64
    assert _core.DEFAULT_MAX_WAITING == 64
    assert _core.DEFAULT_MAX_CONTEXT == 4096
    assert _core.DEFAULT_BATCH_WINDOW_US == 250.0


def test_slot_pool_defaults_come_from_core():
    parameters = inspect.signature(muser.SlotPool.__init__).parameters
    assert parameters["slots"].default == _core.MAX_SLOTS
    assert parameters["max_waiting"].default == _core.DEFAULT_MAX_WAITING
    assert parameters["batch_window_us"].default == _core.DEFAULT_BATCH_WINDOW_US
