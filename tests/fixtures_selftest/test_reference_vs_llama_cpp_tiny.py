"""The NumPy reference agrees with llama.cpp on the tiny synthetic models.

tests/fixtures/llama_cpp_tiny holds llama.cpp's logits at all 60 positions for
24 tiny models (every architecture and storage type, gemma3's window and its
variants), recorded by tests/fixtures/make_llama_cpp_goldens.py with an F16 KV
cache. With float weights llama.cpp does not quantize activations, so the
architecture conventions must agree to float rounding: measured, the
reference is within 0.005 of llama.cpp there, while a sliding window one
position too small or too large moves gemma3's logits by more than 2, and a
swapped RoPE layout or the wrong local RoPE base by more than 3. With
quantized weights llama.cpp rounds activations to 8 bits, which the exact
reference does not, hence the looser bound there.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.numpy_reference import reference_logits
from tests.fixtures.tiny_models import write_tiny_model

GOLDENS = Path(__file__).resolve().parents[1] / "fixtures" / "llama_cpp_tiny"
INDEX = json.loads((GOLDENS / "index.json").read_text())

# (max |logit difference|, llama.cpp top-1/top-2 margin above which the argmax must agree)
BOUNDS = {"F32": (0.01, 0.02), "F16": (0.02, 0.04), "BF16": (0.1, 0.1)}
QUANTIZED_BOUNDS = (0.4, 0.15)


def _golden_model(tmp_path: Path, name: str) -> tuple[Path, np.ndarray]:
    case = INDEX["cases"][name]
    path = write_tiny_model(tmp_path / f"{name}.gguf", **case["arguments"])
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == case["model_sha256"], (
        "tiny_models now writes different bytes for this case; rerun "
        "tests/fixtures/make_llama_cpp_goldens.py to re-record llama.cpp's logits"
    )
    return path, np.load(GOLDENS / f"{name}.npy").astype(np.float64)


@pytest.mark.parametrize("name", sorted(INDEX["cases"]))
def test_reference_logits_agree_with_llama_cpp_at_every_position(tmp_path, name):
    path, theirs = _golden_model(tmp_path, name)
    ours = reference_logits(path, INDEX["tokens"])
    assert ours.shape == theirs.shape
    bound, margin = BOUNDS.get(INDEX["cases"][name]["arguments"]["weight_type"], QUANTIZED_BOUNDS)
    assert np.abs(ours - theirs).max() < bound
    top2 = np.sort(theirs, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > margin
    assert np.array_equal(ours.argmax(axis=1)[clear], theirs.argmax(axis=1)[clear])


@pytest.mark.parametrize("name, bound", [("qwen2-q4_0", 1e-4), ("llama-q8_0", 0.05), ("gemma3-q5_0", 0.07)])
def test_ggml_rounding_reproduces_llama_cpps_q8_0_activation_path(tmp_path, name, bound):
    path, theirs = _golden_model(tmp_path, name)
    exact = np.abs(reference_logits(path, INDEX["tokens"]) - theirs).max()
    emulated = np.abs(reference_logits(path, INDEX["tokens"], ggml_rounding=True) - theirs).max()
    assert emulated < bound < exact
