"""muser: run GGUF language models locally; up to four generations share one
accelerator safely and fast.

The public surface is re-exported here; see the README for a tour.
"""

from __future__ import annotations

from muser.errors import (
    Cancelled,
    ContextOverflow,
    DeadlineExceeded,
    DeviceMemoryError,
    FetchError,
    GrammarError,
    InternalError,
    ModelFormatError,
    MuserError,
    Overloaded,
    SlotReleased,
    SessionFileError,
    Unhealthy,
)
from muser import _core  # noqa: F401  (fail early if the extension is missing)
from muser.engine import BackendInfo, Engine, Session, SessionSnapshot, backends
from muser.pool import CancelToken, Lease, Slot, SlotPool
from muser import limits
from muser import models
from muser import sampling
from muser.sampling.params import SamplingParams
from muser.types import GenerationChunk
from muser.grammar import Grammar
from muser.generation import astream, chat, generate, stream
from muser import embeddings, openai

__version__ = "0.1.0"

__all__ = [
    "BackendInfo",
    "CancelToken",
    "Engine",
    "Lease",
    "Session",
    "SessionSnapshot",
    "Slot",
    "SlotPool",
    "embeddings",
    "limits",
    "models",
    "openai",
    "sampling",
    "SamplingParams",
    "GenerationChunk",
    "Grammar",
    "astream",
    "backends",
    "chat",
    "generate",
    "stream",
    "Cancelled",
    "ContextOverflow",
    "DeadlineExceeded",
    "DeviceMemoryError",
    "FetchError",
    "Grammar",
    "GrammarError",
    "InternalError",
    "ModelFormatError",
    "MuserError",
    "Overloaded",
    "SlotReleased",
    "SessionFileError",
    "Unhealthy",
]
