#!/usr/bin/env bash
# The GPU check of the tensor-core GEMM of branch cuda-gemm3 (issue 12): its TMA version (ops_gemm_mma_tma.cu, the
# default) against the earlier ones (MUSER_CUDA_GEMM=v3: 16 warps with cp.async copies, ops_gemm_mma.cu; v1: the
# first version), one call of about 150 s on the H200 host:
#
#   DEADLINE=150 bash benchmarks/device/cuda_gemm3_check.sh   (from the repository root, $PYLIB carried)
#
# Phases (each only while the budget lasts; a failing test phase still prints its failures and the later
# phases still run):
#   build    cmake + ninja (CUDA ON, sm_90) into build/cuda; meanwhile the random-weight models are written
#   gemm     the GEMM and matvec tests of tests/cuda/test_cuda_ops.py (bitwise the matvec row by row)
#   gbench   benchmarks/bench_cuda_gemm.py at 512 and 64 rows: the GEMM (Q4_0, Q8_0), then v3 and v1
#            (Q4_0): us per llama3-8b matrix
#   pp512    benchmarks/bench_cuda.py --prefill-only on llama3-8b and smollm2 Q4_0, this GEMM then v1
#   engine   tests/cuda/test_cuda_engine.py less its llama3-8b cells (parity, batch/chunk invariance)
#   ncu      if Nsight Compute is there: one q-matrix launch (512 x 4096 x 4096 Q4_0) of the TMA version and of
#            v3: throughput, scheduler and instruction figures and the warp stall reasons, into ncu-v4.txt /
#            ncu-v3.txt
# Results: $OUT/results.txt, build.log, gemm.xml, engine.xml, ncu-*.txt; non-zero exit on failure.
. "$(dirname "$0")/cuda_common.sh"

log "gemm tests"
pytest_phase "GEMM TESTS" 40 gemm.xml tests/cuda/test_cuda_ops.py --maxfail=20 -k "gemm or matvec"

log "bench_cuda_gemm.py, this GEMM (v1 before: Q4_0 512 rows q 253 us, gate 885, down 918)"
timeout "$(cap 20)" python3 -u benchmarks/bench_cuda_gemm.py --rows 512,64 --types Q4_0,Q8_0 --no-groups 2>&1 |
  tee -a "$out/results.txt"
for version in v3 v1; do
  log "bench_cuda_gemm.py, MUSER_CUDA_GEMM=$version"
  MUSER_CUDA_GEMM=$version timeout "$(cap 12)" python3 -u benchmarks/bench_cuda_gemm.py --rows 512,64 --types Q4_0 \
    --no-groups 2>&1 | tee -a "$out/results.txt"
done

bench_models_ready
for version in v4 v1; do
  log "pp512, GEMM $version (llama.cpp: llama3-8b Q4_0 ~11000; v1 at the last integration 4221)"
  MUSER_CUDA_GEMM=$version timeout "$(cap 25)" python3 -u benchmarks/bench_cuda.py --prefill-only \
    "$bench_dir/llama3-8b-Q4_0.gguf" "$bench_dir/smollm2-135m-Q4_0.gguf" 2>&1 | tee -a "$out/results.txt"
done

log "engine tests"
pytest_phase "ENGINE TESTS" 30 engine.xml tests/cuda/test_cuda_engine.py --maxfail=30 -k "not llama3"

ncu_bin=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$ncu_bin" ]; then
  for version in v4 v3; do
    log "ncu, GEMM $version: $ncu_bin"
    MUSER_CUDA_GEMM=$version timeout "$(cap 25)" "$ncu_bin" --target-processes all -k regex:gemm_ \
      --launch-skip 1 --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
      --section InstructionStats --section ComputeWorkloadAnalysis \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python3 benchmarks/bench_cuda_gemm.py --rows 512 --types Q4_0 --shapes q --reps 1 --no-groups \
      >"$out/ncu-$version.txt" 2>&1
    grep -E "Duration|Warp Cycles Per Issued|Issued Warp|No Eligible|L1/TEX Cache|stalled" "$out/ncu-$version.txt" |
      awk '{print $NF "\t" $1 " " $2 " " $3}' | sort -g -r | head -16 | tee -a "$out/results.txt"
  done
else
  log "no ncu on this machine"
fi

log "done, status $status"
exit $status
