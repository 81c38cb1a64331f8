"""Engines for scheduling tests: the real scheduler, sessions, pools and batcher
on a backend that computes nothing and only sleeps."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from muser.engine import Engine

__all__ = ["null_engine"]


def null_engine(
    step_seconds: float = 0.001,
    prefill_seconds_per_row: float = 0.0,
    *,
    threads: int = 1,
    directory: str | os.PathLike[str] | None = None,
) -> Engine:
    """A :class:`muser.Engine` on the null backend, from a tiny model this module writes itself.

    Everything above the backend is muser's real code: the AcceleratorScheduler,
    sessions with their prefill chunking, SlotPool admission and the decode
    batcher. The backend computes nothing: each forward sleeps
    ``step_seconds`` plus ``prefill_seconds_per_row`` per row of a prompt
    chunk, and its logits are a fixed function of (last token, position), so
    greedy decoding is repeatable (token ``t`` at position ``p`` is followed by
    ``(t + p + 1) % n_vocab``). The model has a ChatML template (``muser.chat``
    works) and tokenizes text about one token per character.

    Args:
        step_seconds: time of every forward (a decode group or a prefill chunk).
        prefill_seconds_per_row: extra time per prompt row of a chunk.
        threads: compute threads (the null backend uses none; kept small).
        directory: where to write the model file (default: the temp directory).

    Raises:
        ValueError: a negative or non-finite time.
    """
    import muser
    from muser.testing.null_model import null_model_path

    return muser.Engine(null_model_path(directory), threads=threads, backend="null",
                        null_step_seconds=step_seconds, null_prefill_seconds_per_row=prefill_seconds_per_row)
