"""SamplingParams: every sampling knob, validated, with llama.cpp's defaults."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["SamplingParams", "SAMPLER_NAMES", "DEFAULT_SAMPLER_ORDER"]

#: Names accepted in ``SamplingParams.samplers``.
SAMPLER_NAMES = (
    "penalties",
    "dry",
    "top_n_sigma",
    "top_k",
    "typical_p",
    "top_p",
    "min_p",
    "xtc",
    "temperature",
)

#: llama.cpp's default order (logit bias always runs first, the draw last).
DEFAULT_SAMPLER_ORDER = SAMPLER_NAMES


def _fail(name: str, message: str, value: Any) -> ValueError:
    return ValueError(f"SamplingParams.{name} {message}, got {value!r}")


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(name, "must be a number", value)
    if math.isnan(value):
        raise _fail(name, "must not be NaN", value)
    return float(value)


# Counts and token ids are 32-bit in the core; larger ints would fail later
# with OverflowError instead of a message naming the field.
_INT32_MAX = 2**31 - 1


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, "must be an int", value)
    if abs(value) > _INT32_MAX:
        raise _fail(name, f"must be within +-{_INT32_MAX}", value)
    return value


@dataclass(frozen=True)
class SamplingParams:
    """How to choose each next token. Defaults are llama.cpp's (common_params_sampling).

    The chain is: logit bias, then the samplers named in ``samplers`` in that
    order, then the final draw (or greedy choice at temperature 0). With
    ``mirostat`` 1 or 2 the chain is instead logit bias, temperature, mirostat
    (as in llama.cpp: penalties and truncation do not apply).

    Construction validates every field and raises ``ValueError`` naming the
    field. Immutable and thread-safe; use ``replace(**changes)`` for variants.

    Attributes:
        temperature: divides the logits; 0 chooses the most likely token. >= 0.
        top_k: keep the k most likely tokens; 0 keeps all. >= 0.
        top_p: keep the smallest set whose probability reaches p; 1 disables. In [0, 1].
        min_p: drop tokens less likely than min_p times the top one; 0 disables. In [0, 1].
        typical_p: locally typical sampling mass; 1 disables. In [0, 1].
        top_n_sigma: keep logits within n standard deviations of the max; <= 0 disables.
        xtc_probability: chance per step that XTC removes the top choices; 0 disables. In [0, 1].
        xtc_threshold: probability above which XTC removes a token (all but the
            least likely such one); above 0.5 disables. In [0, 1].
        dynatemp_range: dynamic temperature spread around ``temperature``; 0 disables. >= 0.
        dynatemp_exponent: exponent on the normalized entropy for dynamic temperature. >= 0.
        repeat_penalty: divides (positive) or multiplies (negative) logits of recent
            tokens; 1 disables. > 0.
        frequency_penalty: subtracted per occurrence in the window.
        presence_penalty: subtracted once if the token is in the window.
        penalty_last_n: window of recent tokens for the penalties; 0 disables, -1 unbounded.
        dry_multiplier: DRY penalty scale; 0 disables. >= 0.
        dry_base: DRY growth per extra repeated token. >= 1.
        dry_allowed_length: repeats up to this many tokens are not penalized by DRY. >= 0.
        dry_penalty_last_n: how many recent tokens DRY scans; 0 disables, -1 the whole context.
        dry_sequence_breakers: strings that end a DRY repeat (non-empty strings).
        mirostat: 0 off, 1 mirostat v1, 2 mirostat v2.
        mirostat_tau: mirostat target surprise (bits). > 0.
        mirostat_eta: mirostat learning rate. >= 0.
        min_keep: the truncating samplers keep at least this many tokens. >= 0.
        logit_bias: token id -> added to its logit (``-inf`` bans the token). Ids >= 0.
        samplers: order of the samplers (names from ``SAMPLER_NAMES``; a name
            left out is not applied).
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", '"', "*")
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    min_keep: int = 0
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    samplers: tuple[str, ...] = DEFAULT_SAMPLER_ORDER

    def __post_init__(self) -> None:
        def in_range(name: str, low: float, high: float) -> None:
            value = _number(name, getattr(self, name))
            if not low <= value <= high:
                raise _fail(name, f"must be in [{low}, {high}]", value)

        def at_least(name: str, low: float, *, strict: bool = False) -> None:
            value = _number(name, getattr(self, name))
            if not math.isfinite(value) or value < low or (strict and value == low):
                raise _fail(name, f"must be {'>' if strict else '>='} {low} and finite", value)

        def finite(name: str) -> None:
            value = _number(name, getattr(self, name))
            if not math.isfinite(value):
                raise _fail(name, "must be finite", value)

        at_least("temperature", 0.0)
        if _integer("top_k", self.top_k) < 0:
            raise _fail("top_k", "must be >= 0 (0 disables)", self.top_k)
        for name in ("top_p", "min_p", "typical_p", "xtc_probability", "xtc_threshold"):
            in_range(name, 0.0, 1.0)
        finite("top_n_sigma")
        at_least("dynatemp_range", 0.0)
        at_least("dynatemp_exponent", 0.0)
        at_least("repeat_penalty", 0.0, strict=True)
        finite("frequency_penalty")
        finite("presence_penalty")
        for name in ("penalty_last_n", "dry_penalty_last_n"):
            if _integer(name, getattr(self, name)) < -1:
                raise _fail(name, "must be >= -1 (-1: unbounded, 0: off)", getattr(self, name))
        at_least("dry_multiplier", 0.0)
        at_least("dry_base", 1.0)
        if _integer("dry_allowed_length", self.dry_allowed_length) < 0:
            raise _fail("dry_allowed_length", "must be >= 0", self.dry_allowed_length)
        breakers = self.dry_sequence_breakers
        if isinstance(breakers, str) or not all(isinstance(b, str) and b for b in breakers):
            raise _fail("dry_sequence_breakers", "must be a sequence of non-empty strings", breakers)
        object.__setattr__(self, "dry_sequence_breakers", tuple(breakers))
        if _integer("mirostat", self.mirostat) not in (0, 1, 2):
            raise _fail("mirostat", "must be 0, 1 or 2", self.mirostat)
        at_least("mirostat_tau", 0.0, strict=True)
        at_least("mirostat_eta", 0.0)
        if _integer("min_keep", self.min_keep) < 0:
            raise _fail("min_keep", "must be >= 0", self.min_keep)
        object.__setattr__(self, "logit_bias", MappingProxyType(self._checked_bias(self.logit_bias)))
        order = self.samplers
        if isinstance(order, str) or not all(name in SAMPLER_NAMES for name in order):
            raise _fail("samplers", f"must be a sequence of names from {SAMPLER_NAMES}", order)
        object.__setattr__(self, "samplers", tuple(order))

    @staticmethod
    def _checked_bias(bias: Any) -> dict[int, float]:
        if not isinstance(bias, Mapping):
            raise _fail("logit_bias", "must be a mapping of token id to bias", bias)
        checked: dict[int, float] = {}
        for token, value in bias.items():
            if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= _INT32_MAX:
                raise _fail("logit_bias", f"keys must be token ids (ints in [0, {_INT32_MAX}])", token)
            amount = _number("logit_bias", value)
            if amount == math.inf:
                raise _fail("logit_bias", f"value for token {token} must be finite or -inf", value)
            checked[token] = amount
        return checked

    def replace(self, **changes: Any) -> "SamplingParams":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def greedy(cls) -> "SamplingParams":
        """Always the most likely token (after no penalties): temperature 0."""
        return cls(temperature=0.0)
