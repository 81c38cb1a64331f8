"""Caller-supplied logits processors and stopping criteria, run per generated token.

Where they sit in the chain (documented contract): for each step the
generation loop takes the model's next-token logits, passes them through the
``logits_processors`` in order, and hands the result to the sampler chain
(logit bias, penalties, DRY, truncation, temperature, the draw, then the
grammar check). So a processor sees raw model logits and everything after
it (including a grammar) still applies. After the token is chosen and
recorded, each ``stopping_criteria`` function is called with the sequence
including that token and the logits it was sampled from; the first that
returns ``True`` ends the generation (``finish_reason="stop"``).

When neither is given the loop never builds this object: no array of token
ids, no copies (cheap when absent).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from muser.options import LogitsProcessor, StoppingCriterion

__all__ = ["RequestHooks"]


class RequestHooks:
    """The hooks of one request and the token sequence they are shown.

    Thread safety: belongs to one request's producer thread.
    """

    __slots__ = ("_processors", "_criteria", "_ids", "_length")

    def __init__(self, processors: Sequence[LogitsProcessor], criteria: Sequence[StoppingCriterion],
                 prompt: Sequence[int], max_tokens: int) -> None:
        self._processors = tuple(processors)
        self._criteria = tuple(criteria)
        # Room for the whole request up front, so appending never reallocates;
        # callers get views (np.intc like llama-cpp-python's input_ids).
        self._ids = np.zeros(len(prompt) + max_tokens, dtype=np.intc)
        self._ids[: len(prompt)] = prompt
        self._length = len(prompt)

    @property
    def token_ids(self) -> npt.NDArray[np.intc]:
        """The sequence so far (a copy the hook may keep)."""
        ids: npt.NDArray[np.intc] = self._ids[: self._length].copy()
        return ids

    def process(self, logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Run the processors in order; returns float32 ``(n_vocab,)``.

        Raises:
            ValueError: a processor returned something of another shape.
        """
        if not self._processors:
            return logits
        ids = self.token_ids
        for index, processor in enumerate(self._processors):
            result = np.asarray(processor(ids, logits), dtype=np.float32)
            if result.shape != logits.shape:
                raise ValueError(f"logits_processors[{index}] returned shape {result.shape}, "
                                 f"expected {logits.shape}")
            logits = result
        return logits

    def append_and_check(self, token: int, logits: npt.NDArray[np.float32]) -> bool:
        """Record ``token``; True when a stopping criterion says to stop."""
        if self._length < self._ids.size:
            self._ids[self._length] = token
        else:  # a context shift can let a request run past its planned size
            self._ids = np.append(self._ids, np.intc(token))
        self._length += 1
        if not self._criteria:
            return False
        ids = self.token_ids
        return any(bool(criterion(ids, logits)) for criterion in self._criteria)
