"""Embeddings: pooled final hidden states of texts (``Engine.embed``).

The vectors come from the model's final hidden states after its output norm
(what the output matrix multiplies), one per token, computed as prefills
under the engine's scheduler: several texts share one weight pass, and a
running generation's decode steps still get their turn between forwards.
Pooling (``"mean"`` over tokens, ``"last"`` token, ``"cls"`` = first token)
and L2 normalization run in NumPy afterwards.

Which pooling fits depends on the model: decoder models trained for
embeddings usually want ``"last"`` (or ``"mean"``); BERT-style models
``"cls"``. muser runs the same forward either way.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Union, cast

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from muser.engine import Engine
    from muser.pool import CancelToken

__all__ = ["Pooling", "embed", "hidden_states"]

Pooling = Literal["mean", "last", "cls"]
Texts = Union[Sequence[str], Sequence[Sequence[int]]]


def _token_lists(engine: Engine, texts: Texts, add_special: bool) -> list[list[int]]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise TypeError("texts must be a list of strings (or of token-id lists); for one text pass [text]")
    lists = []
    for index, text in enumerate(texts):
        if isinstance(text, str):
            ids = engine.tokenize(text, add_special=add_special)
        elif isinstance(text, Sequence) and not isinstance(text, bytes):
            ids = [operator.index(t) for t in cast(Sequence[int], text)]
        else:
            raise TypeError(f"texts[{index}] must be a string or a list of token ids, got {type(text).__name__}")
        if not ids:
            raise ValueError(f"texts[{index}] has no tokens")
        lists.append(ids)
    return lists


def hidden_states(engine: Engine, texts: Texts, *, add_special: bool = True,
                  cancel: CancelToken | None = None) -> list[npt.NDArray[np.float32]]:
    """Per text, its final hidden states (after the output norm): float32 ``(n_tokens, n_embd)``.

    Raises:
        ValueError: an empty text, one longer than the model's context, or a
            token id outside the vocabulary.
        Cancelled: ``cancel`` was cancelled (seen between forwards).
    """
    lists = _token_lists(engine, texts, add_special)
    if not lists:
        return []
    arrays: list[npt.NDArray[np.float32]] = engine._core.hidden_states(lists, cancel)
    return arrays


def embed(engine: Engine, texts: Texts, *, pooling: Pooling = "mean", normalize: bool = True,
          add_special: bool = True, cancel: CancelToken | None = None) -> npt.NDArray[np.float32]:
    """One vector per text: float32 ``(len(texts), n_embd)``; see :meth:`muser.Engine.embed`."""
    if pooling not in ("mean", "last", "cls"):
        raise ValueError(f"pooling must be 'mean', 'last' or 'cls', got {pooling!r}")
    rows = hidden_states(engine, texts, add_special=add_special, cancel=cancel)
    n_embd = int(engine.config["n_embd"])
    out = np.empty((len(rows), n_embd), dtype=np.float32)
    for index, states in enumerate(rows):
        if pooling == "mean":
            out[index] = states.astype(np.float64).mean(axis=0)
        elif pooling == "last":
            out[index] = states[-1]
        else:
            out[index] = states[0]
    if normalize:
        norms = np.linalg.norm(out.astype(np.float64), axis=1, keepdims=True)
        out = (out / np.where(norms > 0, norms, 1.0)).astype(np.float32)
    return out
