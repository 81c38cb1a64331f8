"""Bounds on everything a caller can pass, and the argument checks that apply them.

A library embedded in a service receives untrusted prompts, schemas, templates
and sometimes model files. Every input therefore has a documented bound on its
size, nesting or expansion, checked before any work starts, so one request can
cost only bounded time and memory. A bad argument raises ``TypeError`` (wrong
kind of value) or ``ValueError`` (right kind, outside its range) with a
message in words; grammar and template limits raise :class:`muser.GrammarError`
and :class:`muser.chat_template.ChatTemplateError`.

Every limit is a plain module attribute read at call time, so an application
that trusts its inputs more can raise one::

    import muser.limits
    muser.limits.MAX_TEXT_CHARS = 64 << 20

The bounds on model files (tensor overlap, memory implied by the header) live
in the C++ loader and are described in the README's "Limits" section.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

__all__ = [
    "MAX_TEXT_CHARS",
    "MAX_GRAMMAR_CHARS",
    "MAX_GRAMMAR_NESTING",
    "MAX_REPETITION_EXPANSION",
    "MAX_RECOGNIZER_ITEMS",
    "MAX_TEMPLATE_OUTPUT_CHARS",
    "MAX_TEMPLATE_LOOP_ITERATIONS",
    "MAX_SEED",
    "MAX_THREADS",
    "MAX_BATCH_WINDOW_US",
    "MIN_SHIFT_FREED_FRACTION",
    "check_text",
    "check_prompt",
    "check_token_ids",
    "check_timeout",
    "check_seed",
    "check_threads",
    "check_batch_window_us",
    "check_n_keep",
    "check_int",
    "check_sequence_of_str",
]

#: Longest text (in code points) ``tokenize`` and a string prompt accept.
#: Tokenization is linear (about 10 MB/s per thread), so this caps one call at
#: a few seconds; 16 Mi characters is far beyond any model's context.
MAX_TEXT_CHARS = 16 << 20

#: Longest GBNF grammar text (characters), and longest JSON schema text.
MAX_GRAMMAR_CHARS = 1 << 20

#: Deepest nesting of parentheses in a grammar, and of subschemas in a JSON
#: schema. Parsing is recursive; past this the parser would exhaust the stack.
MAX_GRAMMAR_NESTING = 100

#: Largest product of the counts of nested repetitions
#: (``("x"{0,20}){0,50}`` expands to 1,000): each nesting level multiplies the
#: parses an ambiguous match keeps alive at once. A single repetition, or one
#: whose copies are separated by a delimiter (``("," item){0,2000}``), is not
#: a nesting and stays allowed up to 2000.
MAX_REPETITION_EXPANSION = 1_000

#: Most Earley items one recognizer state may hold. Grammars that stay under
#: MAX_REPETITION_EXPANSION can still be ambiguous enough to need more; they
#: fail with GrammarError instead of taking unbounded time and memory.
MAX_RECOGNIZER_ITEMS = 20_000

#: Longest text (characters) a chat template may render, and longest string
#: or list a template expression may build on the way.
MAX_TEMPLATE_OUTPUT_CHARS = 4 << 20

#: Most ``{% for %}`` iterations (summed over all loops) one rendering may run.
MAX_TEMPLATE_LOOP_ITERATIONS = 1_000_000

#: Seeds are 32-bit, as in llama.cpp (its samplers seed std::mt19937 with a
#: uint32). Larger seeds are refused rather than silently cut.
MAX_SEED = 2**32 - 1

#: Most compute threads an engine may start.
MAX_THREADS = 512

#: Longest decode batching window of a SlotPool (one second, in microseconds).
MAX_BATCH_WINDOW_US = 1_000_000.0

#: With ``context_shift``, each shift frees at least this fraction of the
#: context, so shifts are rare: ``n_keep`` may be at most half the context
#: (each shift drops half of the tokens after the kept ones).
MIN_SHIFT_FREED_FRACTION = 0.25

# Timeouts longer than this (about 31 years) mean "no timeout": the core
# counts nanoseconds in int64, which overflows near 292 years.
_UNBOUNDED_TIMEOUT_S = 1e9


def _type_name(value: Any) -> str:
    return type(value).__name__


def check_text(name: str, text: Any) -> str:
    """``text`` must be a ``str`` of at most MAX_TEXT_CHARS characters."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be str, got {_type_name(text)} (decode it first, e.g. data.decode('utf-8'))")
    if not isinstance(text, str):
        raise TypeError(f"{name} must be str, got {_type_name(text)}")
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(
            f"{name} has {len(text)} characters, above muser.limits.MAX_TEXT_CHARS = {MAX_TEXT_CHARS}"
        )
    return text


def check_token_ids(name: str, tokens: Any, n_vocab: int | None = None) -> list[int]:
    """A list of ints, each in ``[0, n_vocab)`` when ``n_vocab`` is given.

    Refuses ``str``/``bytes`` (a text passed where ids belong would otherwise be
    read as a sequence of small integers).
    """
    if isinstance(tokens, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be a sequence of token ids, got {_type_name(tokens)}")
    try:
        items = list(tokens)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of token ids, got {_type_name(tokens)}") from None
    out = []
    for index, token in enumerate(items):
        if isinstance(token, bool):
            raise TypeError(f"{name}[{index}] must be an int token id, got bool")
        try:
            value = operator.index(token)
        except TypeError:
            raise TypeError(f"{name}[{index}] must be an int token id, got {_type_name(token)}") from None
        if value < 0 or (n_vocab is not None and value >= n_vocab):
            bound = f"[0, {n_vocab})" if n_vocab is not None else ">= 0"
            raise ValueError(f"{name}[{index}]: token id {value} is out of range {bound}")
        out.append(value)
    return out


def check_prompt(prompt: Any, n_vocab: int) -> str | list[int]:
    """A prompt is a ``str`` (bounded by MAX_TEXT_CHARS) or a sequence of token ids."""
    if isinstance(prompt, str):
        return check_text("prompt", prompt)
    if isinstance(prompt, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"prompt must be str or a sequence of token ids, got {_type_name(prompt)} "
            "(decode bytes to str first)"
        )
    return check_token_ids("prompt", prompt, n_vocab)


def check_timeout(name: str, value: Any) -> float | None:
    """``None`` or a number of seconds >= 0. ``inf`` and very long timeouts
    mean no timeout (``None``); NaN is refused."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, got {_type_name(value)}")
    seconds = float(value)
    if math.isnan(seconds):
        raise ValueError(f"{name} must be a number of seconds >= 0 or None, got NaN")
    if seconds < 0:
        raise ValueError(f"{name} must be >= 0 seconds or None, got {value!r}")
    if seconds >= _UNBOUNDED_TIMEOUT_S:
        return None
    return seconds


def check_seed(seed: Any, n: int = 1) -> int | None:
    """``None`` or an int in ``[0, MAX_SEED]``. With ``n`` completions the seeds
    are ``seed .. seed + n - 1``; the last must fit too."""
    if seed is None:
        return None
    if isinstance(seed, bool):
        raise TypeError(f"seed must be an int in [0, {MAX_SEED}] or None, got bool")
    try:
        value: int = operator.index(seed)  # ints and numpy integers
    except TypeError:
        raise TypeError(f"seed must be an int in [0, {MAX_SEED}] or None, got {_type_name(seed)}") from None
    if not 0 <= value <= MAX_SEED - (n - 1):
        raise ValueError(
            f"seed must be in [0, {MAX_SEED - (n - 1)}] (32-bit, as llama.cpp; "
            f"{n} completion(s) use seed .. seed + {n - 1}), got {value}"
        )
    return value


def check_threads(threads: Any) -> int | None:
    """``None`` (the physical cores) or an int in ``[1, MAX_THREADS]``."""
    if threads is None:
        return None
    if isinstance(threads, bool):
        raise TypeError("threads must be an int or None, got bool")
    try:
        value = operator.index(threads)
    except TypeError:
        raise TypeError(f"threads must be an int or None, got {_type_name(threads)}") from None
    if not 1 <= value <= MAX_THREADS:
        raise ValueError(f"threads must be in [1, {MAX_THREADS}] (muser.limits.MAX_THREADS) or None, got {value}")
    return value


def check_batch_window_us(value: Any) -> float:
    """A finite number of microseconds in ``[0, MAX_BATCH_WINDOW_US]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"batch_window_us must be a number of microseconds, got {_type_name(value)}")
    window = float(value)
    if not 0.0 <= window <= MAX_BATCH_WINDOW_US:  # also refuses NaN
        raise ValueError(f"batch_window_us must be in [0, {MAX_BATCH_WINDOW_US:g}] microseconds, got {value!r}")
    return window


def check_n_keep(n_keep: Any, max_context: int, context_shift: bool) -> int:
    """``n_keep`` must be >= 0; with ``context_shift`` at most ``max_context // 2``
    so that every shift frees at least MIN_SHIFT_FREED_FRACTION of the context."""
    if isinstance(n_keep, bool):
        raise TypeError("n_keep must be an int, got bool")
    try:
        value = operator.index(n_keep)
    except TypeError:
        raise TypeError(f"n_keep must be an int, got {_type_name(n_keep)}") from None
    if value < 0:
        raise ValueError(f"n_keep must be >= 0 (the prompt tokens a context shift keeps), got {value}")
    limit = max_context // 2
    if context_shift and value > limit:
        raise ValueError(
            f"n_keep must be at most max_context // 2 = {limit} with context_shift, got {value}: "
            f"each shift must free at least {MIN_SHIFT_FREED_FRACTION:.0%} of the context"
        )
    return value


def check_int(name: str, value: Any, low: int = 0, high: int = 2**31 - 1) -> int:
    """An int (not bool; numpy integers are fine) in ``[low, high]``.

    The default upper bound is the core's 32-bit counts: anything larger
    would otherwise fail inside the bindings with an unhelpful message.
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {_type_name(value)}") from None
    if not low <= number <= high:
        raise ValueError(f"{name} must be {low}..{high}, got {number}")
    return number


def check_sequence_of_str(name: str, value: Any) -> tuple[str, ...]:
    """A ``str`` or a sequence of ``str``."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Sequence) or isinstance(value, (bytes, bytearray)):
        raise TypeError(f"{name} must be a str or a sequence of str, got {_type_name(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise TypeError(f"{name}[{index}] must be str, got {_type_name(item)}")
    return tuple(value)
