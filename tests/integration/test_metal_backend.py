"""The Metal backend as users see it, on whatever machine runs the suite.

On Linux (and in this project's CI) the extension has no Metal backend: it
must say so and refuse `backend="metal"` instead of falling back. On macOS
(.github/workflows/macos.yml, never run here: no Mac runner) it must run a
tiny model on the GPU within tolerance of the CPU backend, with a row's
logits bitwise the same alone or in a decode group. The kernels and host code
themselves are exercised on Linux by tests/backend/test_metal_*.py (emulator).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import muser
from tests.fixtures.numpy_reference import reference_logits
from tests.fixtures.tiny_models import write_tiny_model

PROMPTS = [[1, 17, 42, 99, 5, 230, 7], [2, 40, 41, 42]]


def test_metal_is_reported_honestly_and_never_replaced_by_the_cpu(tmp_path):
    metal = {b.name: b for b in muser.backends()}["metal"]
    model = write_tiny_model(tmp_path / "m.gguf", "llama", "Q8_0")
    if sys.platform != "darwin":
        assert not metal.usable
        assert metal.reason == "not built: the Metal backend is built only on Apple platforms"
        with pytest.raises(ValueError, match="metal"):
            muser.Engine(model, backend="metal")
        return

    # macOS: a runner without a GPU would say why here.
    assert metal.usable, metal.reason
    engine = muser.Engine(model, backend="metal")
    assert engine.backend == "metal"
    sessions = [engine.session(max_context=64) for _ in PROMPTS]
    for s, prompt in zip(sessions, PROMPTS):
        s.prefill(prompt)
    engine.decode_group(sessions, [3, 4])
    grouped = [s.logits.copy() for s in sessions]
    alone = engine.session(max_context=64)
    alone.prefill(PROMPTS[1])
    alone.decode(4)
    np.testing.assert_array_equal(alone.logits, grouped[1])
    # The float64 reference of the Metal arithmetic (float activations, f16
    # KV); 5e-4 as on the emulator, to be confirmed on real hardware.
    spec = reference_logits(model, PROMPTS[0] + [3], rows=slice(-1, None))[0]
    assert np.abs(grouped[0] - spec).max() <= 5e-4 * np.abs(spec).max()
