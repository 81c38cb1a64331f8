"""A row's logits do not depend on the engine's thread count (the exactness
contract): how the CPU executor splits matmul tiles, attention heads (query
heads per task depend on the threads), decode chains' columns and KV runs
among threads changes no bits. Prompts cross several KV pages (64 rows each), and the gemma3 model's
sliding window makes the ring wrap."""

from __future__ import annotations

import numpy as np
import pytest

import muser

THREADS = [1, 2, 3, 5, 8]


def _run(path, threads: int) -> list[np.ndarray]:
    engine = muser.Engine(path, threads=threads)
    rng = np.random.default_rng(3)
    n_vocab = engine.config["n_vocab"]
    prompt = [int(t) for t in rng.integers(3, n_vocab, 150)]
    out = []
    session = engine.session(max_context=200)
    session.prefill(prompt)
    out.append(session.logits)
    for token in prompt[:5]:
        session.decode(token)
        out.append(session.logits)
    group = [engine.session(max_context=200) for _ in range(3)]
    for i, s in enumerate(group):
        s.prefill(prompt[: 40 + 50 * i])
    engine.decode_group(group, [5, 6, 7])
    out.extend(s.logits for s in group)
    return out


@pytest.mark.parametrize(
    "arch, weight_type, options",
    [
        ("llama", "Q4_0", {"n_head": 8, "n_head_kv": 2}),
        ("llama", "F32", {"n_head": 6, "n_head_kv": 2}),
        ("gemma3", "Q8_0", {"n_head": 4, "n_head_kv": 1}),
        # Wide FFNs: the decode rows' SwiGLU / GeGLU + quantization chains are cut into 2-3 column pieces
        # (cpu_plan.cpp split_chain_columns) from 2 threads on, the last one shorter.
        ("llama", "Q4_0", {"n_head": 8, "n_head_kv": 2, "n_ff": 2816}),
        ("gemma3", "Q8_0", {"n_head": 4, "n_head_kv": 1, "n_ff": 3328}),
    ],
)
def test_logits_are_bitwise_the_same_at_every_thread_count(tiny_model, arch, weight_type, options):
    path = tiny_model(arch, weight_type, context_length=256, **options)
    expected = _run(path, THREADS[0])
    for threads in THREADS[1:]:
        got = _run(path, threads)
        for i, (a, b) in enumerate(zip(expected, got)):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"threads={threads}, output {i}"


@pytest.mark.parametrize("weight_type", ["Q4_0", "Q4_1", "Q8_0", "Q4_K"])
def test_logits_do_not_depend_on_the_decode_stream_count(tiny_model, weight_type):
    """Decode-sized matmuls on packed weights read 1-4 weight groups side by
    side (muser._core._testing.gemv_streams; the default depends on the
    CPU's vendor) and cut their tasks to match: every count gives the same
    bits, at any thread count."""
    from muser._core import _testing as t

    path = tiny_model("llama", weight_type, n_ff=640 if weight_type == "Q4_K" else 320,
                      n_head=8, n_head_kv=2, context_length=256)
    try:
        t.set_gemv_streams(1)
        expected = _run(path, 2)
        for streams, threads in ((2, 3), (3, 2), (4, 1), (4, 5)):
            t.set_gemv_streams(streams)
            got = _run(path, threads)
            for i, (a, b) in enumerate(zip(expected, got)):
                assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"streams={streams}, output {i}"
    finally:
        t.set_gemv_streams(0)
