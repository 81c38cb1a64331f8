"""Public result types of generation (documented, immutable dataclasses)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = ["FinishReason", "GenerationChunk", "GenerationTimings", "TokenLogprob"]

#: Why a generation ended: a stop string/token or end-of-generation ("stop"), the
#: token limit ("length"), the caller or a stalled consumer ("cancelled"), or a
#: failure ("error").
FinishReason = Literal["stop", "length", "cancelled", "error"]
_FINISH_REASONS = frozenset(get_args(FinishReason))


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token with its log-probability (natural log) and its text.

    ``text`` is the token's own piece decoded on its own, which may be partial
    UTF-8 (shown with U+FFFD) for byte tokens.
    """

    token: int
    logprob: float
    text: str = ""


@dataclass(frozen=True, slots=True)
class GenerationTimings:
    """Where the time went, in milliseconds, for the request so far.

    Attributes:
        prompt_tokens: tokens prefilled (after prefix reuse).
        prompt_ms: time spent prefilling them.
        generated_tokens: tokens generated so far.
        generation_ms: time spent generating them (decode, sampling, detokenizing).
        queue_ms: time spent waiting for a slot.
    """

    prompt_tokens: int = 0
    prompt_ms: float = 0.0
    generated_tokens: int = 0
    generation_ms: float = 0.0
    queue_ms: float = 0.0

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.prompt_tokens / (self.prompt_ms / 1000.0) if self.prompt_ms > 0 else math.nan

    @property
    def generated_tokens_per_second(self) -> float:
        return self.generated_tokens / (self.generation_ms / 1000.0) if self.generation_ms > 0 else math.nan


@dataclass(frozen=True, slots=True)
class GenerationChunk:
    """One piece of a streamed generation.

    Attributes:
        text: newly completed text (may be empty: a token can end mid-character,
            and text that may begin a stop string is held back).
        token_ids: the tokens generated since the previous chunk.
        logprobs: natural-log probability of each token in ``token_ids`` under the
            final sampling distribution, when requested; else None.
        top_logprobs: for each token in ``token_ids``, the top-N alternatives, when
            requested; else None.
        finish_reason: None while generating; set on the last chunk to "stop",
            "length", "cancelled" or "error".
        stop_string: the stop string that ended generation, if one did.
        timings: cumulative timings, when available.
        index: which completion this chunk belongs to when one call asked for
            several (``n`` > 1); 0 otherwise.

    Immutable, so safe to hand between threads. Construction raises ``ValueError``
    for an unknown finish reason or logprob lists that do not match ``token_ids``.
    """

    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] | None = None
    top_logprobs: tuple[tuple[TokenLogprob, ...], ...] | None = None
    finish_reason: FinishReason | None = None
    stop_string: str | None = None
    timings: GenerationTimings | None = None
    index: int = 0

    def __post_init__(self) -> None:
        if self.finish_reason is not None and self.finish_reason not in _FINISH_REASONS:
            raise ValueError(
                f"GenerationChunk.finish_reason must be one of {sorted(_FINISH_REASONS)} or None, "
                f"got {self.finish_reason!r}"
            )
        object.__setattr__(self, "token_ids", tuple(int(t) for t in self.token_ids))
        if self.logprobs is not None:
            object.__setattr__(self, "logprobs", tuple(float(x) for x in self.logprobs))
            if len(self.logprobs) != len(self.token_ids):
                raise ValueError(
                    f"GenerationChunk.logprobs has {len(self.logprobs)} entries for {len(self.token_ids)} tokens"
                )
        if self.top_logprobs is not None:
            object.__setattr__(self, "top_logprobs", tuple(tuple(alts) for alts in self.top_logprobs))
            if len(self.top_logprobs) != len(self.token_ids):
                raise ValueError(
                    f"GenerationChunk.top_logprobs has {len(self.top_logprobs)} entries for "
                    f"{len(self.token_ids)} tokens"
                )

    @property
    def finished(self) -> bool:
        """True on the last chunk of a generation."""
        return self.finish_reason is not None

    @property
    def token(self) -> int | None:
        """The last token id of this chunk, or None if it carries no token."""
        return self.token_ids[-1] if self.token_ids else None
