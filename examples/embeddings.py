"""Embeddings: one vector per text from the model's final hidden states.

SmolLM2 is a chat model, not an embedding model, so the similarities are
rough; a GGUF trained for embeddings (loaded with muser.Engine or
Engine.from_pretrained) works the same way, with the pooling it was trained for.
"""

from __future__ import annotations

import numpy as np

import muser

engine = muser.Engine.from_registry()
texts = ["The cat sat on the mat.", "A kitten is sleeping on a rug.", "Stock markets fell sharply today."]
vectors = engine.embed(texts, pooling="mean")  # float32 (3, n_embd), unit length
similarity = vectors @ vectors.T                # cosine similarities
for text, row in zip(texts, similarity):
    print(f"{text:35s}", " ".join(f"{value:5.2f}" for value in row))
assert vectors.shape == (3, engine.config["n_embd"])
assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
