"""The keyword arguments of ``generate``/``stream``/``astream``/``chat``, declared once.

:class:`GenerationOptions` is a ``TypedDict`` used as ``**options:
Unpack[GenerationOptions]`` (PEP 692): type checkers and IDEs see every
keyword with its type, ``inspect.signature`` (hence ``help()`` and notebook
tooltips) shows them as explicit keyword parameters (:func:`explicit_signature`),
and a misspelt keyword raises ``TypeError`` naming the closest valid one
(:func:`check_keywords`), before anything starts.

Also the two hook types: :data:`LogitsProcessor` and :data:`StoppingCriterion`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypedDict, TypeVar

import numpy as np
import numpy.typing as npt

from muser.grammar import Grammar
from muser.keywords import check_keywords, checked_keywords, did_you_mean
from muser.pool import CancelToken
from muser.sampling.params import SamplingParams

__all__ = [
    "GenerationOptions",
    "SharedOptions",
    "LogitsProcessor",
    "StoppingCriterion",
    "check_keywords",
    "checked_keywords",
    "explicit_signature",
    "GENERATION_KEYWORDS",
    "SAMPLING_KEYWORDS",
]

#: ``fn(token_ids, logits) -> logits``: ``token_ids`` is the whole sequence so far
#: (prompt and generated tokens, ``np.intc`` array), ``logits`` the next-token
#: logits (float32, ``(n_vocab,)``, the caller's own copy: modify it or return
#: a new array). The same shape as llama-cpp-python's and outlines' processors.
LogitsProcessor = Callable[[npt.NDArray[np.intc], npt.NDArray[np.float32]], npt.NDArray[np.float32]]

#: ``fn(token_ids, logits) -> bool``: called after each generated token is
#: appended to ``token_ids``, with the logits it was sampled from; ``True``
#: ends the generation with ``finish_reason="stop"``.
StoppingCriterion = Callable[[npt.NDArray[np.intc], npt.NDArray[np.float32]], bool]


class SharedOptions(TypedDict, total=False):
    """The options every generating function takes, :class:`GenerationOptions`
    less ``max_tokens``/``logprobs``/``top_logprobs`` (which
    :mod:`muser.openai` declares with OpenAI's meaning)."""

    stop: str | Sequence[str]
    stop_token_ids: Sequence[int]
    seed: int | None
    grammar: Grammar | None
    echo: bool
    context_shift: bool
    n_keep: int
    timeout: float | None
    consumer_timeout: float | None
    special: bool
    logits_processors: Sequence[LogitsProcessor] | None
    stopping_criteria: Sequence[StoppingCriterion] | None
    cancel: CancelToken | None
    parse_special: bool
    # SamplingParams fields (see muser.SamplingParams for their meaning and ranges)
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    typical_p: float
    top_n_sigma: float
    xtc_probability: float
    xtc_threshold: float
    dynatemp_range: float
    dynatemp_exponent: float
    repeat_penalty: float
    frequency_penalty: float
    presence_penalty: float
    penalty_last_n: int
    dry_multiplier: float
    dry_base: float
    dry_allowed_length: int
    dry_penalty_last_n: int
    dry_sequence_breakers: tuple[str, ...]
    mirostat: int
    mirostat_tau: float
    mirostat_eta: float
    min_keep: int
    logit_bias: Mapping[int, float]
    samplers: tuple[str, ...]


class GenerationOptions(SharedOptions, total=False):
    """Keyword arguments shared by ``generate``, ``stream``, ``astream`` and ``chat``.

    Generation: ``max_tokens`` (256), ``stop`` (strings), ``stop_token_ids``,
    ``seed``, ``grammar``, ``logprobs``, ``top_logprobs``, ``echo``,
    ``context_shift``/``n_keep``, ``timeout`` (seconds waiting for a slot),
    ``consumer_timeout`` (5 s), ``special`` (show control tokens),
    ``logits_processors``, ``stopping_criteria``, ``cancel`` and
    ``parse_special`` (control-token texts in a string prompt become tokens).
    Sampling: every :class:`muser.SamplingParams` field (llama.cpp's defaults).
    """

    max_tokens: int
    logprobs: bool
    top_logprobs: int


SAMPLING_KEYWORDS: frozenset[str] = frozenset(f.name for f in dataclasses.fields(SamplingParams))
GENERATION_KEYWORDS: frozenset[str] = frozenset(GenerationOptions.__annotations__) - SAMPLING_KEYWORDS

_SAMPLING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SamplingParams)
                      if f.default is not dataclasses.MISSING}

#: Defaults shown by ``inspect.signature`` (the values ``generation._options`` applies).
_GENERATION_DEFAULTS: dict[str, Any] = {
    "max_tokens": 256, "stop": (), "stop_token_ids": (), "seed": None, "grammar": None, "logprobs": False,
    "top_logprobs": 0, "echo": False, "context_shift": False, "n_keep": 0, "timeout": None,
    "consumer_timeout": 5.0, "special": False, "logits_processors": None, "stopping_criteria": None,
    "cancel": None, "parse_special": False,
}

F = TypeVar("F", bound=Callable[..., Any])
def explicit_signature(*, extra: Sequence[str] = ()) -> Callable[[F], F]:
    """Show ``**options: Unpack[GenerationOptions]`` as explicit keyword
    parameters to ``inspect.signature``/``help()`` (runtime only; type checkers
    read the ``Unpack`` annotation). ``extra`` names options the function
    refuses (chat: ``parse_special``), left out of the shown signature."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)
        kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        defaults = {**_GENERATION_DEFAULTS, **_SAMPLING_DEFAULTS}
        present = {p.name for p in kept}
        annotations = GenerationOptions.__annotations__
        order = [*_GENERATION_DEFAULTS, *(f.name for f in dataclasses.fields(SamplingParams))]
        for name in order:
            annotation = annotations[name]
            if name in present or name in extra:
                continue
            text = getattr(annotation, "__forward_arg__", annotation)  # as written, not ForwardRef(...)
            kept.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                          default=defaults.get(name, None), annotation=text))
        function.__signature__ = signature.replace(parameters=kept)  # type: ignore[attr-defined]
        return function

    return decorate
