"""The Metal backend end to end on Linux: the real host code (MetalBackend,
ops_encode.cpp, the Objective-C++ MetalDevice with manual retain/release)
over the fake Metal framework over the emulator, running the engine on tiny
models of every architecture, against the CPU backend.

Tolerances (TOLERANCE below), each |a - b| <= rel * max|b| per logits vector:
- vs the NumPy float64 reference with float activations and an f16 KV
  (tests/fixtures/numpy_reference.py, ggml_rounding off), which is exactly
  the arithmetic the Metal kernels implement: rel 5e-4 for every weight type
  (measured: at most 1.4e-4, BF16; 1e-6..1e-4 for the quantized types).
- vs the CPU backend: rel 5e-4 for float weights; rel 1e-1 for quantized
  weights. The CPU multiplies quantized weights with activations quantized to
  int8 per block (llama.cpp's scheme), the Metal kernels multiply dequantized
  weights with float activations, so they differ by the activation-
  quantization error: measured up to 4.6e-2 on these tiny random models, which
  is also how far the CPU itself is from the float64 reference.

Exactness within Metal is bitwise: a row's logits are the same alone or in a
decode group, after a split or a whole prefill, decoded or prefilled, and
under every emulator thread order.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import muser
from tests.fixtures.numpy_reference import reference_logits
from tests.fixtures.tiny_models import write_tiny_model
from metal_emulator_harness import run_env

pytestmark = pytest.mark.metal_emulator

# (arch, weight type): every architecture, float and quantized weights, and
# K-quants (those tiny models have 256-wide rows).
CASES = [
    ("llama", "F32"), ("llama", "Q4_0"), ("qwen2", "F16"), ("qwen2", "Q8_0"), ("qwen3", "BF16"),
    ("qwen3", "Q5_1"), ("gemma3", "F16"), ("gemma3", "Q4_K"), ("llama", "Q6_K"), ("phi3", "Q8_0"),
    ("olmo2", "F32"),
]
FLOAT_TYPES = {"F32", "F16", "BF16"}
TOLERANCE = {"reference": 5e-4, "cpu_float": 5e-4, "cpu_quantized": 1e-1}
PROMPTS = [[1, 17, 42, 99, 5, 230, 7, 64, 128, 3, 250, 11], [2, 40, 41, 42, 43], [9, 8, 7, 6, 5, 4, 3, 2, 1]]
DECODES = [77, 5, 199]


def script() -> str:
    """Sessions A, B, C prefilled with PROMPTS then decoding DECODES as one
    group; A2, B2, C2 the same but decoding alone; S split-prefills PROMPTS[0];
    P prefills PROMPTS[0] + [DECODES[0]] in one piece; R is A's snapshot
    exported to host rows and imported back (saved sessions), then decoding
    like A; E is the final hidden states of PROMPTS[1] (embeddings)."""
    lines = []
    for name, prompt in zip("ABC", PROMPTS):
        for suffix in ("", "2"):
            lines.append(f"session {name}{suffix} 64")
            lines.append(f"prefill {name}{suffix} {' '.join(map(str, prompt))}")
        lines.append(f"save {name} {name}_prefill")
    lines.append("group 3 A B C " + " ".join(map(str, DECODES)))
    for name, token in zip("ABC", DECODES):
        lines.append(f"save {name} {name}_group")
        lines.append(f"decode {name}2 {token}")
        lines.append(f"save {name}2 {name}_alone")
    lines.append("roundtrip A R")
    lines.append("decode A 31")
    lines.append("save A A_decode2")
    lines.append("decode R 31")
    lines.append("save R R_decode2")
    lines.append(f"embed E {' '.join(map(str, PROMPTS[1]))}")
    p0 = PROMPTS[0]
    lines += ["session S 64", f"prefill S {' '.join(map(str, p0[:5]))}", f"prefill S {' '.join(map(str, p0[5:]))}",
              "save S S_split", "session P 64", f"prefill P {' '.join(map(str, p0 + [DECODES[0]]))}",
              "save P P_whole"]
    return "\n".join(lines) + "\n"


def run_metal(runner, model, tmp_path, backend="metal", env=None):
    out = tmp_path / f"out_{backend}_{(env or {}).get('MUSER_FAKE_METAL_ORDER', 'forward')}"
    out.mkdir()
    (tmp_path / "script.txt").write_text(script())
    done = subprocess.run([str(runner), str(model), backend, str(tmp_path / "script.txt"), str(out)],
                          capture_output=True, text=True, env=run_env(env), timeout=900)
    return done, out


def load(out, name):
    return np.fromfile(out / f"{name}.bin", dtype=np.float32)


def cpu_reference(model):
    """The same script on the CPU backend through the public API."""
    engine = muser.Engine(model, threads=1, backend="cpu")
    sessions = {}
    for name, prompt in zip("ABC", PROMPTS):
        sessions[name] = engine.session(max_context=64)
        sessions[name].prefill(prompt)
    ref = {f"{n}_prefill": sessions[n].logits.copy() for n in "ABC"}
    engine.decode_group([sessions[n] for n in "ABC"], DECODES)
    ref.update({f"{n}_group": sessions[n].logits.copy() for n in "ABC"})
    sessions["A"].decode(31)
    ref["A_decode2"] = sessions["A"].logits.copy()
    return ref


@pytest.fixture(scope="module")
def engine_runner(metal_emulator_programs):
    return metal_emulator_programs["metal_engine_runner"]


@pytest.mark.slow
@pytest.mark.parametrize("arch,weight_type", CASES, ids=[f"{a}-{w}" for a, w in CASES])
def test_metal_engine_matches_cpu_and_is_batch_invariant(engine_runner, tmp_path, arch, weight_type):
    model = write_tiny_model(tmp_path / "model.gguf", arch, weight_type)
    done, out = run_metal(engine_runner, model, tmp_path)
    assert done.returncode == 0, done.stderr[-6000:]
    assert "backend=metal" in done.stdout
    assert "live_fake_objects=0" in done.stdout  # the host released every Metal object it made

    spec = reference_logits(model, PROMPTS[0] + [DECODES[0], 31], rows=slice(-3, None))
    for name, expected in zip(["A_prefill", "A_group", "A_decode2"], spec):
        error = np.abs(load(out, name) - expected).max()
        assert error <= TOLERANCE["reference"] * np.abs(expected).max(), (name, error)

    ref = cpu_reference(model)
    rel = TOLERANCE["cpu_float" if weight_type in FLOAT_TYPES else "cpu_quantized"]
    for name, expected in ref.items():
        error = np.abs(load(out, name) - expected).max()
        assert error <= rel * np.abs(expected).max(), (name, error)

    # Bitwise within Metal: alone == in a group; split == whole prefill;
    # decoded == prefilled.
    for name in "ABC":
        np.testing.assert_array_equal(load(out, f"{name}_alone"), load(out, f"{name}_group"))
    np.testing.assert_array_equal(load(out, "S_split"), load(out, "A_prefill"))
    np.testing.assert_array_equal(load(out, "P_whole"), load(out, "A_group"))
    # A KV exported to host rows and imported again continues bitwise.
    np.testing.assert_array_equal(load(out, "R_decode2"), load(out, "A_decode2"))

    # Embeddings: final hidden states vs the CPU backend's (same runner).
    cpu_done, cpu_out = run_metal(engine_runner, model, tmp_path, backend="cpu")
    assert cpu_done.returncode == 0 and "backend=cpu" in cpu_done.stdout, cpu_done.stderr[-3000:]
    hidden, hidden_cpu = load(out, "E"), load(cpu_out, "E")
    assert hidden.size == hidden_cpu.size > 0 and hidden.size % len(PROMPTS[1]) == 0
    assert np.abs(hidden - hidden_cpu).max() <= rel * np.abs(hidden_cpu).max()


@pytest.mark.slow
@pytest.mark.parametrize("order", ["reverse", "random"])
def test_metal_engine_logits_do_not_depend_on_thread_order(engine_runner, tmp_path, order):
    model = write_tiny_model(tmp_path / "model.gguf", "gemma3", "Q8_0")
    forward, out_forward = run_metal(engine_runner, model, tmp_path)
    other, out_other = run_metal(engine_runner, model, tmp_path,
                                 env={"MUSER_FAKE_METAL_ORDER": order, "MUSER_FAKE_METAL_SEED": "11"})
    assert forward.returncode == 0 and other.returncode == 0, other.stderr[-6000:]
    for f in sorted(out_forward.iterdir()):
        np.testing.assert_array_equal(np.fromfile(f, np.float32), np.fromfile(out_other / f.name, np.float32))


def test_auto_selects_metal_where_a_device_exists(engine_runner, tmp_path):
    model = write_tiny_model(tmp_path / "model.gguf", "llama", "F32")
    (tmp_path / "empty.txt").write_text("")
    done = subprocess.run([str(engine_runner), str(model), "auto", str(tmp_path / "empty.txt"), str(tmp_path)],
                          capture_output=True, text=True, env=run_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "backend=metal" in done.stdout


def test_without_a_device_metal_is_refused_and_auto_takes_the_cpu(engine_runner, tmp_path):
    model = write_tiny_model(tmp_path / "model.gguf", "llama", "F32")
    (tmp_path / "empty.txt").write_text("")
    no_device = {"MUSER_FAKE_METAL_NO_DEVICE": "1"}
    explicit = subprocess.run([str(engine_runner), str(model), "metal", str(tmp_path / "empty.txt"), str(tmp_path)],
                              capture_output=True, text=True, env=run_env(no_device), timeout=300)
    assert explicit.returncode == 3
    assert "no Metal device on this machine" in explicit.stderr
    auto = subprocess.run([str(engine_runner), str(model), "auto", str(tmp_path / "empty.txt"), str(tmp_path)],
                          capture_output=True, text=True, env=run_env(no_device), timeout=300)
    assert auto.returncode == 0, auto.stderr
    assert "backend=cpu" in auto.stdout
