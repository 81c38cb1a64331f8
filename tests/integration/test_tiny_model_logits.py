"""muser's forward pass agrees with the NumPy reference (tests/fixtures/
numpy_reference.py) on tiny synthetic models of every architecture and weight
type, at every position.

Tolerances, in one place: the reference computes in float64 from the
dequantized weights; muser computes in float32 and, for quantized weights,
multiplies int8-quantized activations (as llama.cpp does). Logits of the
tiny models have a standard deviation of about 1, so the bounds are absolute.
A structural bug (wrong RoPE pairing, mask, norm or head mapping) moves the
logits by O(1) and fails both bounds by a wide margin.
"""

from __future__ import annotations

import numpy as np
import pytest

import muser
from tests.fixtures.numpy_reference import reference_logits
from tests.fixtures.tiny_models import ARCHITECTURES, WEIGHT_TYPES

# weight type -> max |muser - reference| over all positions and ids.
FLOAT_TOLERANCE = 2e-3  # float32 arithmetic only
QUANTIZED_TOLERANCE = 0.4  # plus 8-bit activation quantization
TOLERANCE = {t: FLOAT_TOLERANCE if t in ("F32", "F16", "BF16") else QUANTIZED_TOLERANCE for t in WEIGHT_TYPES}

N_TOKENS = 40  # longer than gemma3's tiny sliding window (16)


def _prompt(seed: int, n: int, n_vocab: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, n_vocab, size=n)]


def _logits_at_every_position(path, tokens: list[int], max_context: int | None = None) -> np.ndarray:
    session = muser.Engine(path, threads=2).session(max_context)
    rows = []
    for token in tokens:
        session.decode(token)
        rows.append(session.logits)
    return np.array(rows, dtype=np.float64)


@pytest.mark.parametrize("weight_type", WEIGHT_TYPES)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_logits_match_reference_at_every_position(tiny_model, arch, weight_type):
    path = tiny_model(arch, weight_type, seed=1)
    tokens = _prompt(seed=7, n=N_TOKENS, n_vocab=muser.Engine(path, backend="null").config["n_vocab"])
    expected = reference_logits(path, tokens)
    actual = _logits_at_every_position(path, tokens)
    assert actual.shape == expected.shape
    worst = np.abs(actual - expected).max(axis=1)
    assert worst.max() <= TOLERANCE[weight_type], f"max |diff| per position: {np.round(worst, 4)}"
    # Where the reference's choice is clear, the next token is the same.
    top2 = np.sort(expected, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 2 * TOLERANCE[weight_type]
    assert np.array_equal(actual.argmax(axis=1)[clear], expected.argmax(axis=1)[clear])


def test_prefill_logits_match_reference_for_the_last_position(tiny_model):
    path = tiny_model("qwen2", "F32", seed=2)
    tokens = _prompt(seed=3, n=30, n_vocab=300)
    session = muser.Engine(path, threads=2).session()
    session.prefill(tokens)
    expected = reference_logits(path, tokens, rows=slice(-1, None))[0]
    assert np.abs(session.logits - expected).max() <= FLOAT_TOLERANCE


@pytest.mark.slow
def test_gemma3_matches_reference_after_its_sliding_window_ring_wraps(tiny_model):
    # Window 16: ring planes hold 16 + 511 rows, so 700 positions wrap them.
    path = tiny_model("gemma3", "F32", seed=4, context_length=1024, n_layer=6)
    tokens = _prompt(seed=5, n=700, n_vocab=300)
    expected = reference_logits(path, tokens)
    actual = _logits_at_every_position(path, tokens, max_context=1024)
    worst = np.abs(actual - expected).max(axis=1)
    assert worst.max() <= FLOAT_TOLERANCE, f"worst position {int(worst.argmax())}: {worst.max():.3g}"


def test_gemma3_without_window_soft_caps_its_logits(tiny_model):
    path = tiny_model("gemma3", "F32", seed=6, sliding_window=0, final_logit_softcapping=1.5)
    tokens = _prompt(seed=8, n=12, n_vocab=300)
    expected = reference_logits(path, tokens)
    actual = _logits_at_every_position(path, tokens)
    assert np.abs(actual).max() < 1.5
    assert np.abs(actual - expected).max() <= FLOAT_TOLERANCE


def test_linear_rope_scaling_matches_reference(tiny_model):
    path = tiny_model("llama", "F32", seed=9, rope_scaling_factor=4.0)
    tokens = _prompt(seed=10, n=24, n_vocab=300)
    assert np.abs(_logits_at_every_position(path, tokens) - reference_logits(path, tokens)).max() <= FLOAT_TOLERANCE


def test_untied_output_matrix_is_used_when_present(tiny_model):
    tied = tiny_model("llama", "F32", seed=11, tied_output=True)
    untied = tiny_model("llama", "F32", seed=11, tied_output=False)
    tokens = _prompt(seed=12, n=8, n_vocab=300)
    a = _logits_at_every_position(tied, tokens)
    b = _logits_at_every_position(untied, tokens)
    assert not np.allclose(a, b)
    assert np.abs(b - reference_logits(untied, tokens)).max() <= FLOAT_TOLERANCE
