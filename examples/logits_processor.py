"""Plug in a logits processor written for another library's interface.

``ChoiceConstraint`` is written against llama-cpp-python's ``LogitsProcessor``
type (``fn(input_ids: np.ndarray[intc], scores: np.ndarray[float32]) ->
scores``), the same shape outlines and similar libraries produce: it restricts
the answer to one of a few strings, like outlines' ``generate.choice`` (the
regex ``positive|negative``). muser calls it with the sequence so far and the
raw logits, before its own sampler chain; the same object works unchanged as
``llama_cpp.Llama(...)(prompt, logits_processor=LogitsProcessorList([it]))``.
A stopping criterion of the same shape ends the answer once a choice is complete.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

import muser


class ChoiceConstraint:
    """Allow only tokens that keep the generated text a prefix of one of ``choices``;
    once a choice is complete, allow only end-of-generation tokens."""

    def __init__(self, choices: list[str], token_texts: list[bytes], eog_ids: list[int], prompt_length: int):
        self.choices = [c.encode() for c in choices]
        self.token_texts = token_texts
        self.eog_ids = eog_ids
        self.prompt_length = prompt_length

    def generated(self, input_ids: npt.NDArray[np.intc]) -> bytes:
        return b"".join(self.token_texts[int(t)] for t in input_ids[self.prompt_length:])

    def __call__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        so_far = self.generated(input_ids)
        allowed = np.zeros(scores.shape, dtype=bool)
        if so_far in self.choices:
            allowed[self.eog_ids] = True
        else:
            for token, piece in enumerate(self.token_texts):
                text = so_far + piece
                allowed[token] = bool(piece) and any(choice.startswith(text) for choice in self.choices)
        return np.where(allowed, scores, np.float32(-np.inf)).astype(np.float32)

    def complete(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.float32]) -> bool:
        """A stopping criterion: stop as soon as the text is one of the choices."""
        return self.generated(input_ids) in self.choices


engine = muser.Engine.from_registry()
messages = [{"role": "user", "content": "Is this review positive or negative? 'The food was cold and the "
                                        "waiter was rude.' Answer with one word."}]
prompt = muser.generation.render_chat(engine, messages)
prompt_ids = engine.tokenize(prompt, parse_special=True)
constraint = ChoiceConstraint(["positive", "negative"], engine.token_bytes(), engine.eog_ids, len(prompt_ids))
answer = muser.generate(engine, prompt_ids, max_tokens=8, temperature=0, logits_processors=[constraint],
                        stopping_criteria=[constraint.complete])
print(answer)
assert answer in ("positive", "negative")
