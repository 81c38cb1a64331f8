"""Keyword-argument checking shared by the public API: a misspelt keyword
names the closest valid one (``did you mean max_tokens?``).

Kept free of other muser imports so any module (engine, pool, options) can
use it without an import cycle.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import ParamSpec, TypeVar

__all__ = ["check_keywords", "checked_keywords", "did_you_mean"]

#: Names users bring from other libraries, mapped to ours (checked before the
#: fuzzy match, which would not find them).
_ALIASES = {
    "max_new_tokens": "max_tokens",
    "max_length": "max_tokens",
    "num_predict": "max_tokens",
    "n_predict": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "stop_sequences": "stop",
    "stop_strings": "stop",
    "repetition_penalty": "repeat_penalty",
    "random_seed": "seed",
    "logits_processor": "logits_processors",
    "stopping_criterion": "stopping_criteria",
    "num_return_sequences": "n",
    "n_threads": "threads",
    "thread": "threads",
    "n_ctx": "max_context",
    "context_length": "max_context",
    "num_slots": "slots",
}


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest valid name, or an empty string."""
    valid = list(valid)
    alias = _ALIASES.get(name)
    if alias is not None and alias in valid:
        return f" (did you mean {alias}?)"
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def check_keywords(function: str, given: Iterable[str], valid: Iterable[str]) -> None:
    """Raise ``TypeError`` for the first keyword in ``given`` not in ``valid``,
    naming the closest valid one."""
    valid = set(valid)
    for name in given:
        if name not in valid:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}{did_you_mean(name, valid)}")


P = ParamSpec("P")
R = TypeVar("R")


def checked_keywords(function: Callable[P, R]) -> Callable[P, R]:
    """Make an unknown keyword name the closest valid one, for a function
    with explicit parameters (Python's own message does not suggest one).
    One dict walk per call; the signature is read once, here."""
    parameters = inspect.signature(function).parameters.values()
    names = {p.name for p in parameters
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    names.discard("self")
    names.discard("cls")
    owner, _, name = function.__qualname__.rpartition(".")
    shown = owner if name == "__init__" else function.__qualname__

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        for keyword in kwargs:
            if keyword not in names:
                raise TypeError(f"{shown}() got an unexpected keyword argument {keyword!r}"
                                f"{did_you_mean(keyword, names)}")
        return function(*args, **kwargs)

    return wrapper


