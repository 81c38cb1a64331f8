"""The CUDA backend end to end: against the CPU backend on the same model
(tiny models of every architecture and weight type, and random-weight real
shapes), and the exactness contract on the GPU itself, bitwise: a row alone
or in any decode group of 2..4 in any order, prefill in any chunking, graph
replay equal to eager launches, snapshot/restore, saved session files;
embeddings; typed out-of-memory errors.

Parity criterion (issue 12): wherever the CPU's top-1/top-2 gap is at least
1.0 the CUDA top-1 agrees, and the largest |logit difference| over the CPU's
top-20 is at most 1.0. Each parity test appends its figures to the report
file named by MUSER_CUDA_REPORT (run_on_gpu.sh prints them as a table).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import muser
from muser._core import _testing as t
from tests.cuda.random_real_shapes import write_real_shape
from tests.fixtures.driving import random_prompt
from tests.fixtures.tiny_models import write_tiny_model

TINY_MODELS = {
    "llama-f32": dict(arch="llama", weight_type="F32"),
    "llama-q4_0": dict(arch="llama", weight_type="Q4_0"),
    "llama-q4_1": dict(arch="llama", weight_type="Q4_1"),
    "llama-q2_k": dict(arch="llama", weight_type="Q2_K"),
    "llama-q3_k": dict(arch="llama", weight_type="Q3_K"),
    "qwen2-f16": dict(arch="qwen2", weight_type="F16"),
    "qwen2-q5_0": dict(arch="qwen2", weight_type="Q5_0"),
    "qwen2-q5_k": dict(arch="qwen2", weight_type="Q5_K"),
    "qwen3-q8_0": dict(arch="qwen3", weight_type="Q8_0"),
    "qwen3-bf16": dict(arch="qwen3", weight_type="BF16"),
    "qwen3-q5_1": dict(arch="qwen3", weight_type="Q5_1"),
    "gemma3-q4_k": dict(arch="gemma3", weight_type="Q4_K", sliding_window=16),
    "gemma3-q6_k-softcap": dict(arch="gemma3", weight_type="Q6_K", sliding_window=16,
                                final_logit_softcapping=30.0),
    "phi3-q4_0": dict(arch="phi3", weight_type="Q4_0"),
    "olmo2-q8_0": dict(arch="olmo2", weight_type="Q8_0"),
}


def report(kind: str, name: str, **figures) -> None:
    path = os.environ.get("MUSER_CUDA_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(dict(kind=kind, name=name, **figures)) + "\n")


def compare(cpu_logits: np.ndarray, gpu_logits: np.ndarray) -> tuple[bool, float, float]:
    """(top-1 agrees or the CPU margin is < 1.0, max |delta| over CPU top-20, CPU margin)."""
    order = np.argsort(cpu_logits)[::-1]
    margin = float(cpu_logits[order[0]] - cpu_logits[order[1]])
    agrees = margin < 1.0 or int(np.argmax(gpu_logits)) == int(order[0])
    top20 = order[:20]
    return agrees, float(np.max(np.abs(cpu_logits[top20] - gpu_logits[top20]))), margin


def parity_run(cpu_engine, gpu_engine, prompt, steps):
    """Teacher-forced: prefill, then `steps` decodes of the CPU's greedy tokens.
    Returns (positions compared, clear positions, clear top-1 agreements, max delta)."""
    cpu = cpu_engine.session(max_context=len(prompt) + steps + 1)
    gpu = gpu_engine.session(max_context=len(prompt) + steps + 1)
    cpu.prefill(prompt)
    gpu.prefill(prompt)
    compared = clear = agreed = 0
    worst = 0.0
    for step in range(steps + 1):
        ok, delta, margin = compare(cpu.logits, gpu.logits)
        compared += 1
        if margin >= 1.0:
            clear += 1
            agreed += int(ok)
        worst = max(worst, delta)
        if step < steps:
            token = int(np.argmax(cpu.logits))
            cpu.decode(token)
            gpu.decode(token)
    return compared, clear, agreed, worst


@pytest.fixture(scope="module", params=sorted(TINY_MODELS))
def tiny(request, tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("m") / f"{request.param}.gguf", context_length=2048,
                            **TINY_MODELS[request.param])
    gpu = muser.Engine(path, backend="cuda")
    assert gpu.backend == "cuda"
    return request.param, muser.Engine(path, threads=4, backend="cpu"), gpu


def test_tiny_models_match_the_cpu_backend(tiny):
    name, cpu, gpu = tiny
    prompt = random_prompt(1, 40, cpu.n_vocab)
    compared, clear, agreed, worst = parity_run(cpu, gpu, prompt, 12)
    report("parity", name, positions=compared, clear=clear, agreed=agreed, max_delta_top20=worst)
    assert agreed == clear
    assert worst <= 1.0


def test_a_gemma3_ring_that_wraps_matches_the_cpu(tmp_path):
    # Ring planes hold window + 511 = 527 rows: a 700-token prompt wraps them.
    path = write_tiny_model(tmp_path / "g.gguf", arch="gemma3", weight_type="Q8_0", sliding_window=16,
                            context_length=2048)
    cpu = muser.Engine(path, threads=4, backend="cpu")
    gpu = muser.Engine(path, backend="cuda")
    compared, clear, agreed, worst = parity_run(cpu, gpu, random_prompt(2, 700, cpu.n_vocab), 8)
    report("parity", "gemma3-q8_0-ring-700", positions=compared, clear=clear, agreed=agreed,
           max_delta_top20=worst)
    assert agreed == clear and worst <= 1.0


def test_a_row_is_bitwise_the_same_alone_and_in_any_decode_group(tiny):
    _, _, gpu = tiny
    n = 4
    prompts = [random_prompt(10 + i, 5 + 7 * i, gpu.n_vocab) for i in range(n)]

    def fresh():
        sessions = [gpu.session(max_context=128) for _ in range(n)]
        for s, p in zip(sessions, prompts):
            s.prefill(p)
        return sessions

    alone = fresh()
    tokens = [[int(t) for t in np.random.default_rng(20 + i).integers(0, gpu.n_vocab, 3)] for i in range(n)]
    expected = []
    for step in range(3):
        row = []
        for i, s in enumerate(alone):
            s.decode(tokens[i][step])
            row.append(s.logits.copy())
        expected.append(row)
    for groups in ([[0, 1, 2, 3]], [[3, 1], [0, 2]], [[2, 0, 3], [1]], [[1, 3, 2, 0]]):
        sessions = fresh()
        for step in range(3):
            for group in groups:
                gpu.decode_group([sessions[i] for i in group], [tokens[i][step] for i in group])
            for i in range(n):
                assert np.array_equal(sessions[i].logits, expected[step][i]), (groups, step, i)


def test_prefill_gives_the_same_bits_in_any_chunking(tiny):
    _, _, gpu = tiny
    prompt = random_prompt(3, 37, gpu.n_vocab)
    whole = gpu.session(max_context=64)
    whole.prefill(prompt)
    # Chunks of 2..4 rows run the decode attention kernel over rows whose
    # older positions the same step writes.
    for cuts in ([5], [1, 2, 30], [2, 5, 9, 13, 30], list(range(1, 37))):
        s = gpu.session(max_context=64)
        start = 0
        for cut in cuts + [len(prompt)]:
            s.prefill(prompt[start:cut])
            start = cut
        assert np.array_equal(s.logits, whole.logits), cuts
        token = int(np.argmax(whole.logits))
        s.decode(token)
        ref = gpu.session(max_context=64)
        ref.prefill(prompt + [token])
        assert np.array_equal(s.logits, ref.logits)


def test_runs_are_deterministic_and_snapshots_restore_exactly(tiny):
    _, _, gpu = tiny
    prompt = random_prompt(4, 30, gpu.n_vocab)
    a = gpu.session(max_context=64)
    a.prefill(prompt)
    snap = a.snapshot()
    a.decode(7)
    after = a.logits.copy()
    b = gpu.session(max_context=64)
    b.prefill(prompt)
    b.decode(7)
    assert np.array_equal(b.logits, after)
    a.restore(snap)
    a.decode(7)
    assert np.array_equal(a.logits, after)


def test_a_saved_session_loads_and_continues_bitwise(tiny, tmp_path):
    _, _, gpu = tiny
    prompt = random_prompt(5, 30, gpu.n_vocab)
    a = gpu.session(max_context=64)
    a.prefill(prompt)
    path = a.save(tmp_path / "session.safetensors")
    saved_logits = a.logits.copy()
    a.decode(7)
    b = gpu.load_session(path)
    assert b.n_past == len(prompt)
    assert np.array_equal(b.logits, saved_logits)
    b.decode(7)
    assert np.array_equal(b.logits, a.logits)


def test_embeddings_do_not_depend_on_batching_and_agree_with_the_cpu(tiny):
    name, cpu, gpu = tiny
    texts = [random_prompt(seed, n, gpu.n_vocab) for seed, n in ((1, 9), (2, 17), (3, 5))]
    together = gpu.embed(texts, normalize=False)
    alone = np.stack([gpu.embed([text], normalize=False)[0] for text in texts])
    assert np.array_equal(together, alone)
    on_cpu = cpu.embed(texts)
    on_gpu = gpu.embed(texts)
    assert on_gpu.shape == on_cpu.shape == (3, together.shape[1])
    cosine = np.sum(on_cpu * on_gpu, axis=1)
    report("embedding", name, min_cosine_vs_cpu=float(np.min(cosine)))
    assert np.min(cosine) > 0.99


def decode_trace(engine, prompts, tokens):
    """Logits of every row after a decode alone, then in a group of all rows,
    then in pairs: the 1..4-row decode graphs (and the KV they wrote, which
    each later step reads)."""
    sessions = [engine.session(max_context=128) for _ in prompts]
    for s, p in zip(sessions, prompts):
        s.prefill(p)
    trace = []
    for i, s in enumerate(sessions):
        s.decode(tokens[i][0])
        trace.append(s.logits.copy())
    engine.decode_group(sessions, [tok[1] for tok in tokens])
    trace += [s.logits.copy() for s in sessions]
    for pair in ((2, 0), (1, 3)):
        engine.decode_group([sessions[i] for i in pair], [tokens[i][2] for i in pair])
    trace += [s.logits.copy() for s in sessions]
    return trace


def assert_fusion_keeps_the_bits(path, monkeypatch):
    # The backend reads MUSER_CUDA_FUSE when it is made: one engine runs the
    # RoPE + KV store and the GLU in the matvecs' epilogues at every decode
    # step ("1"), one apart ("0"); the default fuses the RoPE + KV store of
    # groups of 2..4 rows, and a third engine runs that.
    monkeypatch.setenv("MUSER_CUDA_FUSE", "0")
    apart = muser.Engine(path, backend="cuda")
    monkeypatch.setenv("MUSER_CUDA_FUSE", "1")
    fused = muser.Engine(path, backend="cuda")
    monkeypatch.delenv("MUSER_CUDA_FUSE")
    default = muser.Engine(path, backend="cuda")
    prompts = [random_prompt(40 + i, 6 + 5 * i, fused.n_vocab) for i in range(4)]
    tokens = [[int(x) for x in np.random.default_rng(50 + i).integers(0, fused.n_vocab, 3)] for i in range(4)]
    reference = decode_trace(apart, prompts, tokens)
    for engine in (fused, default):
        for k, (a, b) in enumerate(zip(reference, decode_trace(engine, prompts, tokens))):
            assert np.array_equal(a, b), k


@pytest.mark.parametrize("name", ["llama-q4_0", "qwen3-q8_0", "gemma3-q4_k", "phi3-q4_0"])
def test_fused_decode_epilogues_give_the_bits_of_separate_launches(name, tmp_path, monkeypatch):
    path = write_tiny_model(tmp_path / f"{name}.gguf", context_length=2048, **TINY_MODELS[name])
    assert_fusion_keeps_the_bits(path, monkeypatch)


@pytest.mark.parametrize("name", ["llama-q4_0", "gemma3-q4_k"])
def test_captured_decode_steps_fit_their_attention_grids_to_the_rows_bitwise(name, tmp_path, monkeypatch):
    """A replayed decode step launches only the attention splits its rows
    reach (the grid is refitted before each replay). Rows hundreds of
    positions apart, decoded alone and in groups while they cross chunk
    boundaries (every 128 positions for heads of 16, 64 for gemma3's 128,
    past its 16-position window on the ring layers), so the grid grows and
    shrinks between replays: every row keeps the bits of an engine that
    launches every split, and of prefilling its whole sequence."""
    path = write_tiny_model(tmp_path / f"{name}.gguf", context_length=2048, **TINY_MODELS[name])
    monkeypatch.setenv("MUSER_CUDA_ATTENTION_GRID", "full")
    every_split = muser.Engine(path, backend="cuda")
    monkeypatch.delenv("MUSER_CUDA_ATTENTION_GRID")
    fitted = muser.Engine(path, backend="cuda")
    prompts = [random_prompt(60 + i, n, fitted.n_vocab) for i, n in enumerate((3, 120, 250, 500))]
    tokens = [[int(x) for x in np.random.default_rng(70 + i).integers(0, fitted.n_vocab, 24)] for i in range(4)]
    schedule = [[0, 1, 2, 3], [0], [3, 2], [1, 0], [2], [3, 0, 1, 2]]

    def trace(engine):
        sessions = [engine.session(max_context=600) for _ in range(4)]
        for s, p in zip(sessions, prompts):
            s.prefill(p)
        done = [0] * 4
        logits = []
        for step in range(24):
            for group in schedule:
                group = [i for i in group if done[i] < 24]
                if not group:
                    continue
                engine.decode_group([sessions[i] for i in group], [tokens[i][done[i]] for i in group])
                for i in group:
                    done[i] += 1
                logits += [sessions[i].logits.copy() for i in group]
        assert done == [24] * 4
        return logits, [s.logits.copy() for s in sessions]

    expected, expected_last = trace(every_split)
    got, got_last = trace(fitted)
    assert len(got) == len(expected) == 96
    for k, (a, b) in enumerate(zip(expected, got)):
        assert np.array_equal(a, b), k
    for i in range(4):
        whole = fitted.session(max_context=600)
        whole.prefill(prompts[i] + tokens[i])
        assert np.array_equal(whole.logits, got_last[i]), i
        assert np.array_equal(got_last[i], expected_last[i]), i


# smollm2's 576-wide rows are no multiple of 256, so its K-quant cells use llama3-8b.
REAL = [("smollm2-135m", "Q4_0"), ("smollm2-135m", "Q8_0"), ("smollm2-135m", "Q5_0"), ("llama3-8b", "Q4_K")]


@pytest.fixture(scope="module", params=REAL, ids=lambda p: f"{p[0]}-{p[1]}")
def real(request):
    shape, qtype = request.param
    root = os.environ.get("MUSER_CUDA_MODELS", "/tmp/muser-cuda-models")
    os.makedirs(root, exist_ok=True)
    path = write_real_shape(os.path.join(root, f"spread-{shape}-{qtype}.gguf"), shape, qtype)
    return f"{shape}-{qtype}", path


@pytest.mark.slow
def test_random_weight_real_shapes_match_the_cpu_and_are_batch_invariant(real):
    name, path = real
    cpu = muser.Engine(path, backend="cpu")
    gpu = muser.Engine(path, backend="cuda")
    prompt = random_prompt(5, 24, cpu.n_vocab)
    compared, clear, agreed, worst = parity_run(cpu, gpu, prompt, 6)
    report("parity", name, positions=compared, clear=clear, agreed=agreed, max_delta_top20=worst)
    assert agreed == clear and worst <= 1.0
    # Batch invariance on the real shapes: row 0 alone vs inside a group of 4.
    sessions = [gpu.session(max_context=64) for _ in range(5)]
    for i, s in enumerate(sessions):
        s.prefill(prompt if i in (0, 4) else random_prompt(30 + i, 9 + i, gpu.n_vocab))
    sessions[4].decode(11)
    gpu.decode_group([sessions[2], sessions[0], sessions[3], sessions[1]], [5, 11, 6, 9])
    assert np.array_equal(sessions[0].logits, sessions[4].logits)


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["smollm2-135m", "llama3-8b-2layers"])
def test_fused_decode_epilogues_keep_the_bits_on_real_q4_0_shapes(shape, monkeypatch):
    # The layer shapes (and type) of the decode benchmark's models, which take both fusions.
    root = os.environ.get("MUSER_CUDA_MODELS", "/tmp/muser-cuda-models")
    os.makedirs(root, exist_ok=True)
    path = write_real_shape(os.path.join(root, f"spread-{shape}-Q4_0.gguf"), shape, "Q4_0")
    assert_fusion_keeps_the_bits(path, monkeypatch)


# decode_trace of a model in a process of its own (MUSER_CUDA_DECODE_MMA and
# MUSER_CUDA_FUSE are read once per process), saved to argv[2].
DECODE_TRACE_SCRIPT = """
import sys
import numpy as np
import muser
from tests.cuda.test_cuda_engine import decode_trace
from tests.fixtures.driving import random_prompt
engine = muser.Engine(sys.argv[1], backend="cuda")
prompts = [random_prompt(40 + i, 6 + 5 * i, engine.n_vocab) for i in range(4)]
tokens = [[int(x) for x in np.random.default_rng(50 + i).integers(0, engine.n_vocab, 3)] for i in range(4)]
np.save(sys.argv[2], np.stack(decode_trace(engine, prompts, tokens)))
"""


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["tiny-llama", "smollm2-135m", "llama3-8b-2layers"])
def test_decode_groups_on_the_tensor_cores_keep_the_bits_of_the_dp4a_kernels(shape, tmp_path):
    """MUSER_CUDA_DECODE_MMA=2 or 3 (the default) sends Q4_0 decode groups
    from 2 or 3 rows to the tensor-core matvec: every launch but a q/k/v one
    with its RoPE + KV epilogue over mid-sized matrices (those too under
    MUSER_CUDA_DECODE_MMA_ROPE=1, no such launch under =0; q/k/v apart under
    MUSER_CUDA_FUSE=0), not the mid-sized matrices under _MID=0, on the GGUF
    blocks where rows hold a multiple of 8 under _BLOCKS=1, or on the packed
    copy only under =0: every logit of every row, decoded alone and in groups
    of 4 and 2, is bitwise what the dp4a kernels give ("0"). The shapes cover every walk: 2, 18
    and 48 units a row (tiny, smollm2), 128 and llama3-8b's ffn_down at 448."""
    if shape == "tiny-llama":
        path = write_tiny_model(tmp_path / "llama-q4_0.gguf", context_length=2048, **TINY_MODELS["llama-q4_0"])
    else:
        root = os.environ.get("MUSER_CUDA_MODELS", "/tmp/muser-cuda-models")
        os.makedirs(root, exist_ok=True)
        path = write_real_shape(os.path.join(root, f"spread-{shape}-Q4_0.gguf"), shape, "Q4_0")
    settings = {"dp4a": {"MUSER_CUDA_DECODE_MMA": "0"}, "mma-2": {"MUSER_CUDA_DECODE_MMA": "2"},
                "mma-3": {"MUSER_CUDA_DECODE_MMA": "3"},
                "mma-3-rope": {"MUSER_CUDA_DECODE_MMA": "3", "MUSER_CUDA_DECODE_MMA_ROPE": "1"},
                "mma-3-dp4a-rope": {"MUSER_CUDA_DECODE_MMA": "3", "MUSER_CUDA_DECODE_MMA_ROPE": "0"},
                "mma-2-apart": {"MUSER_CUDA_DECODE_MMA": "2", "MUSER_CUDA_FUSE": "0"},
                "mma-3-dp4a-rope-and-mid": {"MUSER_CUDA_DECODE_MMA": "3", "MUSER_CUDA_DECODE_MMA_ROPE": "0",
                                            "MUSER_CUDA_DECODE_MMA_MID": "0"},
                "mma-3-blocks": {"MUSER_CUDA_DECODE_MMA": "3", "MUSER_CUDA_DECODE_MMA_BLOCKS": "1"},
                "mma-3-packed-only": {"MUSER_CUDA_DECODE_MMA": "3", "MUSER_CUDA_DECODE_MMA_BLOCKS": "0"}}
    traces = {}
    for label, env in settings.items():
        out = tmp_path / f"{label}.npy"
        done = subprocess.run([sys.executable, "-c", DECODE_TRACE_SCRIPT, str(path), str(out)],
                              env=dict(os.environ, **env), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        traces[label] = np.load(out)
    assert np.all(np.isfinite(traces["dp4a"]))
    for label in settings:
        assert np.array_equal(traces[label], traces["dp4a"]), label


def test_running_out_of_device_memory_raises_a_memory_error_naming_the_model_and_context(tmp_path):
    # 2 layers x (512 + 512) f16 per position: a 3000-token prompt needs ~12 MB of KV.
    path = write_tiny_model(tmp_path / "big.gguf", head_dim=256, context_length=4096)
    gpu = muser.Engine(path, backend="cuda")
    # A 512-row step first, so the step's own buffers are at full size before
    # the device fills up: then the KV is what runs out.
    gpu.session(max_context=4096).prefill(random_prompt(8, 600, gpu.n_vocab))
    s = gpu.session(max_context=4096)
    s.prefill([1, 2, 3])
    prompt = random_prompt(9, 3000, gpu.n_vocab)
    hold = None
    for margin_mib in (4, 8, 16, 32):
        try:
            hold = t.CudaMemoryHold(t.cuda_free_bytes() - margin_mib * 2**20)
            break
        except MemoryError:
            continue
    assert hold is not None
    try:
        with pytest.raises(MemoryError, match=r"model 'llama'.*max_context is 4096") as info:
            s.prefill(prompt)
        assert isinstance(info.value, muser.DeviceMemoryError)
    finally:
        hold.release()
    # Nothing was installed: the session continues where it was.
    assert s.n_past == 3
    s.prefill(prompt)
    assert s.n_past == 3003 and np.isfinite(s.logits).all()
