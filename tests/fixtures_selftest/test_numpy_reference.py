"""Properties of the NumPy reference forward pass on tiny synthetic models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.fixtures.numpy_reference import (
    attention,
    attention_mask,
    gelu_tanh,
    ggml_gelu_table,
    load_reference_model,
    reference_generate_greedy,
    reference_hidden_states,
    reference_logits,
    rope,
    round_to_bfloat16,
    round_to_q8_blocks,
)
from tests.fixtures.tiny_models import ARCHITECTURES, N_VOCAB, WEIGHT_TYPES, write_tiny_model

TOKENS = [int(t) for t in np.random.default_rng(7).integers(3, N_VOCAB, size=40)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny_models")


def _model(model_dir, arch="llama", weight_type="F32", **options):
    name = "-".join([arch, weight_type] + [f"{k}={v}" for k, v in sorted(options.items())]) + ".gguf"
    path = model_dir / name
    return path if path.exists() else write_tiny_model(path, arch, weight_type, **options)


# --------------------------------------------------------------------------- building blocks


def test_attention_mask_is_causal_and_keeps_the_last_window_positions():
    visible = attention_mask(5, sliding_window=2)
    expected = np.array(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 0, 1, 1],
        ],
        dtype=bool,
    )
    assert np.array_equal(visible, expected)
    assert np.array_equal(attention_mask(4, sliding_window=0), np.tril(np.ones((4, 4), dtype=bool)))


@pytest.mark.parametrize("layout, partner", [("normal", 1), ("neox", 4)])
def test_rope_rotates_the_documented_pair_by_position_times_frequency(layout, partner):
    # head_dim 8: pair 0 is (0, 1) in the normal layout and (0, 4) in the NeoX layout
    x = np.zeros((3, 1, 8))
    x[:, 0, 0] = 1.0
    out = rope(x, np.array([0, 1, 5]), n_rot=8, freq_base=10000.0, freq_scale=0.5, layout=layout)
    angles = np.array([0, 1, 5]) * 0.5  # pair 0 has frequency base**0 = 1
    assert np.allclose(out[:, 0, 0], np.cos(angles))
    assert np.allclose(out[:, 0, partner], np.sin(angles))
    assert np.allclose(np.delete(out[:, 0, :], [0, partner], axis=1), 0.0)


def test_rope_leaves_dimensions_past_n_rot_unchanged_and_preserves_norm():
    x = np.random.default_rng(0).standard_normal((6, 2, 12))
    out = rope(x, np.arange(6), n_rot=8, freq_base=500.0, freq_scale=1.0, layout="neox")
    assert np.array_equal(out[..., 8:], x[..., 8:])
    assert np.allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1))


@pytest.mark.parametrize("layout", ["normal", "neox"])
def test_rope_scores_depend_only_on_relative_position(layout):
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((1, 1, 16)), rng.standard_normal((1, 1, 16))

    def score(pq: int, pk: int) -> float:
        rq = rope(q, np.array([pq]), 16, 10000.0, 1.0, layout)
        rk = rope(k, np.array([pk]), 16, 10000.0, 1.0, layout)
        return float(rq.ravel() @ rk.ravel())

    assert score(7, 3) == pytest.approx(score(104, 100), rel=1e-9)


def test_grouped_query_attention_equals_attention_over_repeated_kv_heads():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((5, 4, 8))
    k, v = rng.standard_normal((5, 2, 8)), rng.standard_normal((5, 2, 6))
    visible = attention_mask(5, 0)
    grouped = attention(q, k, v, visible, 0.3)
    repeated = attention(q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1), visible, 0.3)
    assert np.allclose(grouped, repeated, rtol=0, atol=1e-12)


def test_q8_block_rounding_keeps_each_value_within_half_a_step():
    x = np.random.default_rng(3).standard_normal((3, 64))
    x[1, :32] = 0.0  # an all-zero block stays zero
    rounded = round_to_q8_blocks(x, 32, f16_scale=False)
    steps = np.abs(x).reshape(3, 2, 32).max(axis=-1) / 127
    assert np.all(np.abs(rounded - x).reshape(3, 2, 32) <= steps[..., None] / 2 + 1e-7)
    assert np.array_equal(rounded[1, :32], np.zeros(32))
    grid = np.arange(-127, 128, dtype=np.float64)[None, :] * 0.5  # already on the 8-bit grid, step 0.5
    assert np.array_equal(round_to_q8_blocks(grid, 255, f16_scale=True), grid)


def test_bfloat16_rounding_is_nearest_with_ties_to_even():
    x = np.array([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-7 + 2.0**-9, -2.5])
    assert np.array_equal(round_to_bfloat16(x), [1.0, 1.0 + 2.0**-6, 1.0 + 2.0**-7, -2.5])


def test_ggml_gelu_table_saturates_and_otherwise_rounds_to_float16():
    x = np.array([-12.0, -10.0, -1.3, 0.0, 0.7, 9.99, 10.0, 12.5])
    out = ggml_gelu_table(x)
    assert (out[0], out[1], out[-2], out[-1]) == (0.0, 0.0, 10.0, 12.5)
    middle = x[2:6]
    assert np.array_equal(out[2:6], gelu_tanh(middle.astype(np.float16).astype(np.float64)).astype(np.float16))


# --------------------------------------------------------------------------- configuration


def test_config_follows_each_architectures_conventions(model_dir):
    llama = load_reference_model(_model(model_dir, "llama")).config
    assert (llama.rope_layout, llama.embedding_scale, llama.sliding_window) == ("normal", 1.0, 0)
    assert llama.query_scale == pytest.approx(1 / math.sqrt(16))
    qwen3 = load_reference_model(_model(model_dir, "qwen3")).config
    assert (qwen3.rope_layout, qwen3.head_dim_k, qwen3.n_rot) == ("neox", 32, 32)
    gemma3 = load_reference_model(_model(model_dir, "gemma3")).config
    assert gemma3.rope_layout == "neox"
    assert gemma3.embedding_scale == pytest.approx(8.0)
    assert gemma3.query_scale == pytest.approx(1 / math.sqrt(32))
    assert gemma3.local_layers == (True, True, True, True, True, False)
    assert (gemma3.rope_freq_base_local, gemma3.rope_freq_base) == (10000.0, 1e6)
    assert gemma3.sliding_window == 16


def test_gemma3_window_pattern_and_local_rope_base_come_from_the_file_when_present(model_dir):
    period = load_reference_model(_model(model_dir, "gemma3", sliding_window_pattern=2)).config
    assert period.local_layers == (True, False, True, False, True, False)
    flags = (False, True, True, False, False, True)
    listed = load_reference_model(_model(model_dir, "gemma3", sliding_window_pattern=flags)).config
    assert listed.local_layers == flags
    every = load_reference_model(_model(model_dir, "gemma3", sliding_window_pattern=0)).config
    assert every.local_layers == (True,) * 6
    base = load_reference_model(_model(model_dir, "gemma3", rope_freq_base_swa=500.0)).config
    assert (base.rope_freq_base_local, base.rope_freq_base) == (500.0, 1e6)
    no_window = load_reference_model(_model(model_dir, "gemma3", sliding_window=0)).config
    assert no_window.local_layers == (False,) * 6


def test_linear_rope_scaling_applies_to_global_layers_only(model_dir):
    cfg = load_reference_model(_model(model_dir, "gemma3", rope_scaling_factor=8.0)).config
    assert (cfg.rope_freq_scale, cfg.rope_freq_scale_local) == (0.125, 1.0)
    scaled = reference_logits(_model(model_dir, "llama", rope_scaling_factor=4.0), TOKENS)
    plain = reference_logits(_model(model_dir, "llama"), TOKENS)
    assert np.array_equal(scaled[0], plain[0])  # position 0 is not rotated
    assert not np.allclose(scaled[1:], plain[1:])


# --------------------------------------------------------------------------- forward pass


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("weight_type", WEIGHT_TYPES)
def test_logits_have_one_finite_row_per_token(model_dir, arch, weight_type):
    logits = reference_logits(_model(model_dir, arch, weight_type), TOKENS[:12])
    assert logits.shape == (12, N_VOCAB)
    assert np.all(np.isfinite(logits))
    assert logits.std() > 0.1


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("weight_type, tolerance", [("F16", 0.02), ("BF16", 0.1), ("Q8_0", 0.3)])
def test_quantized_model_tracks_the_f32_model_it_was_quantized_from(model_dir, arch, weight_type, tolerance):
    exact = reference_logits(_model(model_dir, arch, "F32"), TOKENS[:16])
    quantized = reference_logits(_model(model_dir, arch, weight_type), TOKENS[:16])
    assert np.abs(quantized - exact).max() < tolerance


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_logits_at_a_position_ignore_later_tokens(model_dir, arch):
    path = _model(model_dir, arch, "Q8_0")
    changed = TOKENS[:20] + [(t + 1) % N_VOCAB for t in TOKENS[20:]]
    original, altered = reference_logits(path, TOKENS), reference_logits(path, changed)
    assert np.array_equal(original[:20], altered[:20])
    assert not np.allclose(original[20:], altered[20:])


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_prefix_logits_equal_the_rows_of_the_full_sequence(model_dir, arch):
    path = _model(model_dir, arch)
    full = reference_logits(path, TOKENS)
    assert np.allclose(reference_logits(path, TOKENS[:9]), full[:9], rtol=0, atol=1e-10)
    assert np.allclose(reference_logits(path, TOKENS, rows=slice(-1, None)), full[-1:], rtol=0, atol=1e-10)
    assert np.allclose(reference_logits(path, TOKENS, rows=slice(5, 12)), full[5:12], rtol=0, atol=1e-10)


def test_sliding_window_changes_only_positions_past_the_window(model_dir):
    windowed = reference_logits(_model(model_dir, "gemma3", sliding_window=16), TOKENS)
    full = reference_logits(_model(model_dir, "gemma3", sliding_window=256), TOKENS)
    assert np.array_equal(windowed[:16], full[:16])
    assert np.all(np.abs(windowed[16:] - full[16:]).max(axis=1) > 1e-6)


def test_one_local_layer_sees_exactly_the_last_window_tokens(model_dir):
    # one gemma3 layer is local; attention depends on relative positions only, so the
    # logits at position t equal a fresh run over the window of tokens ending at t.
    window = 8
    path = _model(model_dir, "gemma3", n_layer=1, sliding_window=window)
    assert load_reference_model(path).config.local_layers == (True,)
    full = reference_logits(path, TOKENS, f16_kv=False)
    for t in (window - 1, window, 17, len(TOKENS) - 1):
        alone = reference_logits(path, TOKENS[t - window + 1 : t + 1], f16_kv=False, rows=slice(-1, None))[0]
        assert np.allclose(full[t], alone, rtol=0, atol=1e-9), t
    # and the window is what makes it so: without it the last position sees every token
    unwindowed = _model(model_dir, "gemma3", n_layer=1, sliding_window=256)
    assert not np.allclose(reference_logits(unwindowed, TOKENS, f16_kv=False)[-1], full[-1], rtol=0, atol=1e-6)


def test_tied_output_projects_onto_the_token_embedding(model_dir):
    tied_path = _model(model_dir, "qwen2", tied_output=True)
    untied_path = _model(model_dir, "qwen2", tied_output=False)
    hidden = reference_hidden_states(tied_path, TOKENS)
    assert np.array_equal(hidden, reference_hidden_states(untied_path, TOKENS))
    embedding = load_reference_model(tied_path).weight("token_embd.weight").astype(np.float64)
    output = load_reference_model(untied_path).weight("output.weight").astype(np.float64)
    assert np.allclose(reference_logits(tied_path, TOKENS), hidden @ embedding.T, rtol=0, atol=1e-10)
    assert np.allclose(reference_logits(untied_path, TOKENS), hidden @ output.T, rtol=0, atol=1e-10)


def test_final_logit_softcapping_bounds_the_logits(model_dir):
    capped_path = _model(model_dir, "gemma3", final_logit_softcapping=2.0)
    raw = reference_hidden_states(capped_path, TOKENS) @ load_reference_model(capped_path).weight(
        "token_embd.weight"
    ).astype(np.float64).T
    capped = reference_logits(capped_path, TOKENS)
    assert np.abs(capped).max() < 2.0
    assert np.allclose(capped, 2.0 * np.tanh(raw / 2.0), rtol=0, atol=1e-12)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_f16_kv_cache_changes_logits_only_slightly(model_dir, arch):
    path = _model(model_dir, arch)
    f16 = reference_logits(path, TOKENS, f16_kv=True)
    f32 = reference_logits(path, TOKENS, f16_kv=False)
    difference = np.abs(f16 - f32).max()
    assert 0.0 < difference < 1e-2


def test_greedy_generation_appends_the_argmax_of_each_step(model_dir):
    path = _model(model_dir, "qwen3", "Q4_0")
    generated = reference_generate_greedy(path, TOKENS[:5], 6)
    assert len(generated) == 6
    sequence = TOKENS[:5] + generated
    logits = reference_logits(path, sequence)
    assert generated == [int(np.argmax(row)) for row in logits[4:-1]]


@pytest.mark.parametrize("tokens", [[], [0, N_VOCAB], [-1]])
def test_tokens_outside_the_vocabulary_raise_value_error(model_dir, tokens):
    with pytest.raises(ValueError):
        reference_logits(_model(model_dir), tokens)
