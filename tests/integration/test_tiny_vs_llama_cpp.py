"""muser agrees with llama.cpp itself on the tiny synthetic models, at every
position: tests/fixtures/llama_cpp_tiny holds llama.cpp's logits for 30
cases (every architecture and storage type, and gemma3's window, pattern,
local RoPE base, RoPE scaling and soft-capping variants, and phi3 and olmo2),
recorded by
tests/fixtures/make_llama_cpp_goldens.py.

Bounds: float weights leave only float32 rounding and llama.cpp's float16
rounding of queries and softmax weights (BF16: llama.cpp also rounds the
activations to bfloat16); quantized weights add 8-bit activations, rounded a
little differently on each side. Measured: at most 0.006 (F32/F16), 0.035
(BF16), 0.21 (quantized).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import muser
from tests.fixtures.tiny_models import write_tiny_model

GOLDENS = Path(__file__).resolve().parents[1] / "fixtures" / "llama_cpp_tiny"
INDEX = json.loads((GOLDENS / "index.json").read_text())

# weight type -> (max |muser - llama.cpp|, llama.cpp top-1/top-2 margin above which the argmax must agree)
BOUNDS = {"F32": (0.02, 0.04), "F16": (0.02, 0.04), "BF16": (0.1, 0.2)}
QUANTIZED_BOUNDS = (0.4, 0.8)


@pytest.mark.parametrize("name", sorted(INDEX["cases"]))
def test_logits_agree_with_llama_cpp_at_every_position(tmp_path, name):
    case = INDEX["cases"][name]
    path = write_tiny_model(tmp_path / f"{name}.gguf", **case["arguments"])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == case["model_sha256"], "golden is stale"
    theirs = np.load(GOLDENS / f"{name}.npy").astype(np.float64)

    session = muser.Engine(path, threads=2).session()
    rows = []
    for token in INDEX["tokens"]:
        session.decode(token)
        rows.append(session.logits)
    ours = np.array(rows, dtype=np.float64)

    bound, margin = BOUNDS.get(case["arguments"]["weight_type"], QUANTIZED_BOUNDS)
    assert np.abs(ours - theirs).max() < bound
    top2 = np.sort(theirs, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > margin
    assert np.array_equal(ours.argmax(axis=1)[clear], theirs.argmax(axis=1)[clear])
