"""ggml's CPU matmul on the same random weights as bench_kernels.py, for a
side-by-side kernel comparison. Runs under the peer interpreter (the
llama-cpp-python build of ../shared/tools/peer-venv.sh, which ships
libggml-cpu compiled natively for this CPU); bench_kernels.py --peer calls it.

    PEER_PYTHON benchmarks/peer_ggml_matmul.py < spec.json > result.json

spec: {"min_seconds": 0.2, "cases": [{"type": "Q4_1", "n_in": 576, "n_out": 1536,
       "rows": 1, "threads": 1}, ...]}
result: [{"seconds": best seconds per matmul, "median": ...}, ...] in case order.

Each timing computes a graph of K identical mul_mat nodes (the weight stays
in cache, as in muser's repeated calls) on a persistent ggml threadpool and
divides by K. Weights live in a plain ggml context, so this is ggml's
mul_mat path with its vec_dot / llamafile-sgemm kernels, not the repacked
(REPACK) layouts llama.cpp's model loader may choose for some types.
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys
import time

import llama_cpp

from random_weights import TYPES, random_activations, random_weight

LIB_DIR = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
base = ctypes.CDLL(os.path.join(LIB_DIR, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
cpu = ctypes.CDLL(os.path.join(LIB_DIR, "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)


class InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


class CPlan(ctypes.Structure):
    _fields_ = [("work_size", ctypes.c_size_t), ("work_data", ctypes.c_void_p), ("n_threads", ctypes.c_int),
                ("threadpool", ctypes.c_void_p), ("abort_callback", ctypes.c_void_p),
                ("abort_callback_data", ctypes.c_void_p), ("use_ref", ctypes.c_bool)]


base.ggml_init.argtypes = [InitParams]
base.ggml_init.restype = ctypes.c_void_p
base.ggml_free.argtypes = [ctypes.c_void_p]
base.ggml_new_tensor_2d.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
base.ggml_new_tensor_2d.restype = ctypes.c_void_p
base.ggml_mul_mat.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
base.ggml_mul_mat.restype = ctypes.c_void_p
base.ggml_new_graph.argtypes = [ctypes.c_void_p]
base.ggml_new_graph.restype = ctypes.c_void_p
base.ggml_build_forward_expand.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
base.ggml_get_data.argtypes = [ctypes.c_void_p]
base.ggml_get_data.restype = ctypes.c_void_p
base.ggml_threadpool_params_init.argtypes = [ctypes.c_void_p, ctypes.c_int]
cpu.ggml_cpu_init.argtypes = []
cpu.ggml_threadpool_new.argtypes = [ctypes.c_void_p]
cpu.ggml_threadpool_new.restype = ctypes.c_void_p
cpu.ggml_threadpool_free.argtypes = [ctypes.c_void_p]
cpu.ggml_graph_plan.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
cpu.ggml_graph_plan.restype = CPlan
cpu.ggml_graph_compute.argtypes = [ctypes.c_void_p, ctypes.POINTER(CPlan)]
cpu.ggml_graph_compute.restype = ctypes.c_int


def time_case(case: dict, min_seconds: float) -> dict:
    type_id, _, _ = TYPES[case["type"]]
    n_in, n_out, rows, threads = case["n_in"], case["n_out"], case["rows"], case["threads"]
    raw = random_weight(case["type"], n_in, n_out)
    x = random_activations(rows, n_in)
    n_nodes = max(1, min(64, int(2e6 // max(1, n_in * n_out * rows // 256))))
    mem = raw.nbytes + x.nbytes + n_nodes * (n_out * rows * 4 + 1024) + (1 << 20)
    ctx = base.ggml_init(InitParams(mem, None, False))
    try:
        w = base.ggml_new_tensor_2d(ctx, type_id, n_in, n_out)
        ctypes.memmove(base.ggml_get_data(w), raw.ctypes.data, raw.nbytes)
        xt = base.ggml_new_tensor_2d(ctx, 0, n_in, rows)
        ctypes.memmove(base.ggml_get_data(xt), x.ctypes.data, x.nbytes)
        graph = base.ggml_new_graph(ctx)
        for _ in range(n_nodes):
            base.ggml_build_forward_expand(graph, base.ggml_mul_mat(ctx, w, xt))
        params = ctypes.create_string_buffer(4096)
        base.ggml_threadpool_params_init(params, threads)
        pool = cpu.ggml_threadpool_new(params)
        try:
            plan = cpu.ggml_graph_plan(graph, threads, pool)
            work = ctypes.create_string_buffer(max(1, plan.work_size))
            plan.work_data = ctypes.cast(work, ctypes.c_void_p)
            cpu.ggml_graph_compute(graph, ctypes.byref(plan))  # warm-up
            times = []
            deadline = time.perf_counter() + min_seconds
            while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 2000):
                start = time.perf_counter()
                cpu.ggml_graph_compute(graph, ctypes.byref(plan))
                times.append((time.perf_counter() - start) / n_nodes)
        finally:
            cpu.ggml_threadpool_free(pool)
    finally:
        base.ggml_free(ctx)
    return {"seconds": min(times), "median": statistics.median(times)}


def main() -> None:
    spec = json.load(sys.stdin)
    cpu.ggml_cpu_init()
    json.dump([time_case(case, spec.get("min_seconds", 0.2)) for case in spec["cases"]], sys.stdout)


if __name__ == "__main__":
    main()
