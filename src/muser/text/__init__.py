"""Text out: streaming detokenization and stop conditions."""

from __future__ import annotations

from muser.text.detokenizer import DetokenizerState, StreamingDetokenizer
from muser.text.stops import StopCheck, StopMatcher, StopMatcherState

__all__ = ["DetokenizerState", "StopCheck", "StopMatcher", "StopMatcherState", "StreamingDetokenizer"]
