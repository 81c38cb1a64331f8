"""Stop conditions: stop strings (held back while a partial match is pending),
stop token ids, and the model's end-of-generation tokens."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["StopMatcher", "StopCheck", "StopMatcherState"]


@dataclass(frozen=True)
class StopCheck:
    """What :meth:`StopMatcher.push` found.

    Attributes:
        text: text that is safe to emit now (never contains a stop string nor a
            pending partial match).
        stopped: a stop string completed; generation should end here.
        stop_string: the stop string that completed, else None.
    """

    text: str
    stopped: bool = False
    stop_string: str | None = None


@dataclass(frozen=True)
class StopMatcherState:
    held: str
    stopped_on: str | None
    finished: bool


class StopMatcher:
    """Watches streamed text for stop strings.

    ``push(text)`` returns the text that can be emitted now. Text that could be
    the start of a stop string is held back until it either completes the stop
    string (generation stops; the stop string and anything after it are never
    emitted) or can no longer match (it is released).

    The result does not depend on how the text is split: the stream stops at
    the first character at which any stop string is complete; if several
    complete there, the one starting earliest (then the one listed first) wins.

    Token-level stops: ``is_stop_token(id)`` is True for ``stop_token_ids`` and
    for the model's ``end_of_generation_ids`` (EOS, EOT, ...). A token that stops
    generation contributes no text; call ``flush()`` to release held-back text.

    Thread safety: one matcher per request; not synchronized.
    Failure: ``ValueError`` for an empty stop string, or a push after a stop.
    """

    __slots__ = ("stop_strings", "_stop_tokens", "_held", "_stopped_on", "_finished")

    def __init__(
        self,
        stop_strings: Iterable[str] = (),
        *,
        stop_token_ids: Iterable[int] = (),
        end_of_generation_ids: Iterable[int] = (),
    ) -> None:
        strings = tuple(stop_strings) if not isinstance(stop_strings, str) else (stop_strings,)
        for s in strings:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop strings must be non-empty str, got {s!r}")
        self.stop_strings: tuple[str, ...] = strings
        self._stop_tokens = frozenset(int(t) for t in stop_token_ids) | frozenset(
            int(t) for t in end_of_generation_ids
        )
        self._held = ""
        self._stopped_on: str | None = None
        self._finished = False

    def is_stop_token(self, token_id: int) -> bool:
        """True if generating ``token_id`` ends the generation."""
        return int(token_id) in self._stop_tokens

    @property
    def held(self) -> str:
        """Text held back because it may be the start of a stop string."""
        return self._held

    @property
    def stopped(self) -> bool:
        return self._stopped_on is not None

    def push(self, text: str) -> StopCheck:
        """Add newly decoded text; return what may be emitted now."""
        if self._finished:
            raise ValueError("StopMatcher already finished: reset() it before pushing more text")
        buffer = self._held + text
        hit = self._first_completed(buffer)
        if hit is not None:
            start, stop_string = hit
            self._held = ""
            self._stopped_on = stop_string
            self._finished = True
            return StopCheck(buffer[:start], True, stop_string)
        keep = self._pending_length(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return StopCheck(buffer[: len(buffer) - keep])

    def flush(self) -> str:
        """Generation ended for another reason: release the held-back text."""
        text, self._held = self._held, ""
        self._finished = True
        return text

    def reset(self) -> None:
        self._held = ""
        self._stopped_on = None
        self._finished = False

    def snapshot(self) -> StopMatcherState:
        return StopMatcherState(self._held, self._stopped_on, self._finished)

    def restore(self, state: StopMatcherState) -> None:
        if not isinstance(state, StopMatcherState):
            raise TypeError(f"expected StopMatcherState, got {type(state).__name__}")
        self._held, self._stopped_on, self._finished = state.held, state.stopped_on, state.finished

    def _first_completed(self, buffer: str) -> tuple[int, str] | None:
        """(start, stop string) of the stop completing first in ``buffer``."""
        best: tuple[int, int, str] | None = None  # (end, start, string)
        for stop_string in self.stop_strings:
            start = buffer.find(stop_string)
            if start < 0:
                continue
            end = start + len(stop_string)
            if best is None or (end, start) < (best[0], best[1]):
                best = (end, start, stop_string)
        return None if best is None else (best[1], best[2])

    def _pending_length(self, buffer: str) -> int:
        """Length of the longest suffix of ``buffer`` that begins some stop string."""
        longest = 0
        for stop_string in self.stop_strings:
            for size in range(min(len(stop_string) - 1, len(buffer)), longest, -1):
                if buffer.endswith(stop_string[:size]):
                    longest = size
                    break
        return longest
