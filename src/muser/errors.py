"""Exceptions raised by muser.

Every failure muser reports is one of these (or a built-in ``ValueError`` /
``TypeError`` / ``TimeoutError`` for plain argument and timeout errors). The
compiled core raises the same classes, translated once in its bindings.
"""

from __future__ import annotations

__all__ = [
    "MuserError",
    "ModelFormatError",
    "ContextOverflow",
    "Overloaded",
    "Unhealthy",
    "Cancelled",
    "DeadlineExceeded",
    "GrammarError",
    "InternalError",
    "DeviceMemoryError",
    "FetchError",
    "SlotReleased",
    "SessionFileError",
]


class MuserError(Exception):
    """Base class of every muser-specific error."""


class ModelFormatError(MuserError, ValueError):
    """A GGUF file is malformed, truncated, or uses something unsupported.

    The message names the key or tensor, with what was expected and what was found.
    """


class ContextOverflow(MuserError):
    """A sequence would grow past its context limit. Nothing was changed."""


class Overloaded(MuserError):
    """Admission is full: too many callers are already waiting for a slot."""


class Unhealthy(MuserError):
    """A pool latched unhealthy after a lease ended in an unknown state.

    Make a new pool (or engine) to continue.
    """


class Cancelled(MuserError):
    """A request was cancelled by its caller or because its consumer stalled."""


class DeadlineExceeded(MuserError, TimeoutError):
    """A request ran past its ``timeout`` (the deadline for the whole request:
    waiting for a slot, prefill and generation). Its slot was freed."""


class SlotReleased(MuserError, RuntimeError):
    """A :class:`muser.Slot` was used after its lease ended; the slot may
    already serve another request, so nothing was done."""


class GrammarError(MuserError, ValueError):
    """A GBNF grammar or JSON schema could not be parsed or compiled."""


class InternalError(MuserError):
    """A broken internal invariant in muser. Please report it."""


class DeviceMemoryError(MuserError, MemoryError):
    """An accelerator (GPU) ran out of memory.

    The message names the model and what was being allocated (weights, or a
    session's KV for its context). Nothing was changed: free sessions, use
    fewer slots or a shorter ``max_context``, or pick ``backend="cpu"``.
    """


class FetchError(MuserError):
    """A registry model could not be downloaded, assembled or verified."""


class SessionFileError(MuserError, ValueError):
    """A saved session file is malformed, or belongs to another model or backend.

    The message names the file and, for a mismatch, both models.
    """
