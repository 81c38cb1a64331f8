"""Progress bars for downloads: tqdm on stderr when a person is watching.

Shown when stderr is a terminal or the code runs in a Jupyter kernel (then
``tqdm.auto`` draws a notebook widget); never in logs, CI output or pipes
unless asked for with ``progress=True``; never with ``progress=False``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["byte_bar", "watching"]


def watching() -> bool:
    """True when someone can see a progress bar (a terminal or a notebook)."""
    if "ipykernel" in sys.modules:
        return True
    stream = sys.stderr
    return stream is not None and hasattr(stream, "isatty") and stream.isatty()


@contextmanager
def byte_bar(description: str, show: bool | None) -> Iterator[Callable[[int, int | None], None] | None]:
    """A ``progress(done, total)`` callback drawing bytes and rate, or None when
    not shown (``show`` None means: when :func:`watching`)."""
    if not (watching() if show is None else show):
        yield None
        return
    factory: Any
    if "ipykernel" in sys.modules:
        from tqdm.auto import tqdm as factory
    else:
        from tqdm import tqdm as factory
    bar = factory(desc=description, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
               dynamic_ncols=True, leave=True)

    def update(done: int, total: int | None) -> None:
        if total is not None and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    try:
        yield update
    finally:
        bar.close()
