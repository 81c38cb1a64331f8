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
    "GrammarError",
    "InternalError",
    "FetchError",
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


class GrammarError(MuserError, ValueError):
    """A GBNF grammar or JSON schema could not be parsed or compiled."""


class InternalError(MuserError):
    """A broken internal invariant in muser. Please report it."""


class FetchError(MuserError):
    """A registry model could not be downloaded, assembled or verified."""


class SessionFileError(MuserError, ValueError):
    """A saved session file is malformed, or belongs to another model or backend.

    The message names the file and, for a mismatch, both models.
    """
