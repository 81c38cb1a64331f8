#!/usr/bin/env bash
# The GPU check of the int8 tensor-core prefill GEMM (issue 12, ops_gemm_mma.cu), in one call of
# about 5 minutes on the H200 host:
#
#   DEADLINE=300 bash benchmarks/device/cuda_gemm_check.sh   (from the repository root, $PYLIB carried)
#
# Phases (each only while the budget lasts; a failing test phase still prints its failures and the
# later phases still run):
#   build    cmake + ninja (CUDA ON, sm_90) into build/cuda; meanwhile the random-weight llama3-8b and
#            smollm2-135m Q4_0 models are written
#   gemm     the GEMM and matvec tests of tests/cuda/test_cuda_ops.py (bitwise the matvec row by row,
#            float reference)
#   bench    benchmarks/bench_cuda.py on llama3-8b Q4_0 and smollm2 (pp512 beside decode)
#   engine   tests/cuda/test_cuda_engine.py less its llama3-8b Q4_K cell (parity, batch/chunk invariance)
#   gbench   benchmarks/bench_cuda_gemm.py: us per llama3-8b matrix at 512, 64, 16 and 8 rows (GEMM vs
#            decode groups of 4)
#   ops      the rest of tests/cuda/test_cuda_ops.py
#   profile  benchmarks/bench_cuda_step_profile.py, prefill 512 of llama3-8b Q4_0
# Results: $OUT/results.txt, build.log, gemm.xml, engine.xml, ops.xml; non-zero exit on failure.
set -uo pipefail
root=$(pwd); lib=${PYLIB:-$root/.cudawork/lead/pylib}
out=${OUT:-/tmp/out}; mkdir -p "$out"
deadline=${DEADLINE:-300}
models=${MUSER_CUDA_MODELS:-/tmp/muser-cuda-models}; mkdir -p "$models"
export MUSER_CUDA_MODELS="$models"
start=$(date +%s); el() { echo $(( $(date +%s) - start )); }
left() { local l=$(( deadline - $(el) )); echo $(( l > 1 ? l : 1 )); }
cap() { local l; l=$(left); echo $(( l < $1 ? l : $1 )); }
log() { echo "[$(el) s] $*" | tee -a "$out/results.txt"; }
status=0

export PYTHONPATH="$root/src:$root:$lib"
export MUSER_CUDA_TESTS=1 MUSER_CUDA_REPORT="$out/report.jsonl"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$out/results.txt"

python3 - "$models" > "$out/gen.log" 2>&1 <<'PY' &
import sys
from tests.cuda.random_real_shapes import write_real_shape
for shape, qtype in (("smollm2-135m", "Q4_0"), ("llama3-8b", "Q4_0")):
    write_real_shape(f"{sys.argv[1]}/spread-{shape}-{qtype}.gguf", shape, qtype)
PY
gen=$!

log "build"
if ! { cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMUSER_CUDA=ON \
         -DMUSER_CUDA_ARCHITECTURES=90-real -DPython_EXECUTABLE="$(command -v python3)" &&
       cmake --build build/cuda -j "$(nproc)"; } >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log" | tee -a "$out/results.txt"; log "BUILD FAILED"; exit 1
fi
cp build/cuda/_core*.so src/muser/
log "built"

log "gemm tests"
timeout "$(cap 90)" python3 -m pytest tests/cuda/test_cuda_ops.py -q -p no:cacheprovider -rf --maxfail=20 \
  -k "gemm or matvec" --junitxml="$out/gemm.xml" 2>&1 | tail -40 | tee -a "$out/results.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "GEMM TESTS FAILED (or timed out)"; }

wait $gen || { log "model generation failed:"; tail -5 "$out/gen.log" | tee -a "$out/results.txt"; }
bench_dir=/tmp/muser-bench; mkdir -p "$bench_dir"
for m in smollm2-135m-Q4_0 llama3-8b-Q4_0; do ln -sf "$models/spread-$m.gguf" "$bench_dir/$m.gguf"; done

log "bench_cuda.py (llama.cpp: llama3-8b Q4_0 pp512 ~11000; before this GEMM 1540)"
timeout "$(cap 60)" python3 -u benchmarks/bench_cuda.py "$bench_dir/llama3-8b-Q4_0.gguf" \
  "$bench_dir/smollm2-135m-Q4_0.gguf" 2>&1 | tee -a "$out/results.txt"

log "engine tests"
timeout "$(cap 80)" python3 -m pytest tests/cuda/test_cuda_engine.py -q -p no:cacheprovider -rf --maxfail=30 \
  -k "not llama3" --junitxml="$out/engine.xml" 2>&1 | tail -40 | tee -a "$out/results.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "ENGINE TESTS FAILED (or timed out)"; }

log "bench_cuda_gemm.py (us per call; 301 ms of matvec tiles per pp512 before)"
timeout "$(cap 40)" python3 -u benchmarks/bench_cuda_gemm.py --rows 512,64,16,8 --types Q4_0,Q4_K 2>&1 | \
  tee -a "$out/results.txt"

log "other ops tests"
timeout "$(cap 75)" python3 -m pytest tests/cuda/test_cuda_ops.py -q -p no:cacheprovider -rf --maxfail=30 \
  -k "not gemm and not matvec" --junitxml="$out/ops.xml" 2>&1 | tail -20 | tee -a "$out/results.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "OPS TESTS FAILED (or timed out)"; }

log "prefill profile, llama3-8b Q4_0"
timeout "$(left)" python3 -u benchmarks/bench_cuda_step_profile.py "$bench_dir/llama3-8b-Q4_0.gguf" --rows 1 \
  --steps 4 --prefill 512 --top 12 2>&1 | tee -a "$out/results.txt"

log "done, status $status"
exit $status
