#!/usr/bin/env bash
# The GPU check of the decode matvec configs (issue 12: csrc/backend/cuda/ops_matvec_decode.cu), in one call of
# about 5 minutes on the H200 host:
#
#   bash benchmarks/device/cuda_matvec_check.sh        (from the repository root, $PYLIB carried)
#
# Carry the pure-Python packages the device image lacks (gguf, ...) in the folder $PYLIB names
# (default .cudawork/lead/pylib). Phases, each only while the budget (DEADLINE seconds, default 300)
# lasts; a failing test phase still prints its failures and the later phases still run:
#   build    cmake + ninja (CUDA ON, sm_90) into build/cuda; meanwhile the random-weight real-shape
#            models llama3-8b Q4_0 and smollm2-135m Q4_0 (tests/cuda/random_real_shapes.py) are written
#   ops      tests/cuda/test_cuda_ops.py (every decode config bitwise the prefill tiles, all types,
#            k 576/4096/14336; attention, norms, rope, quantize)
#   matvec   benchmarks/bench_cuda_matvec.py: us and % of 4.3 TB/s per llama3-8b shape, 1/2/4 rows,
#            Q4_0 and Q4_K, matvec's own config and each forced one
#   engine   tests/cuda/test_cuda_engine.py (CPU-vs-CUDA parity, batch and chunking invariance),
#            less its llama3-8b Q4_K real-shape cell
#   bench    benchmarks/bench_cuda.py on both models: decode tok/s at 1/2/4 rows, pp512, bandwidth
#   profile  benchmarks/bench_cuda_step_profile.py on llama3-8b Q4_0: GPU time per kernel per step
# Results: $OUT/results.txt (everything printed), build.log, ops.xml, engine.xml, report.jsonl;
# exit status non-zero if the build or a test failed.
set -uo pipefail
root=$(pwd); lib=${PYLIB:-$root/.cudawork/lead/pylib}
out=${OUT:-/tmp/out}; mkdir -p "$out"
deadline=${DEADLINE:-300}
models=${MUSER_CUDA_MODELS:-/tmp/muser-cuda-models}; mkdir -p "$models"
export MUSER_CUDA_MODELS="$models"
start=$(date +%s); el() { echo $(( $(date +%s) - start )); }
left() { local l=$(( deadline - $(el) )); echo $(( l > 1 ? l : 1 )); }  # timeout 0 would mean none
cap() { local l; l=$(left); echo $(( l < $1 ? l : $1 )); }             # min(phase cap, budget left)
log() { echo "[$(el) s] $*" | tee -a "$out/results.txt"; }
status=0

export PYTHONPATH="$root/src:$root:$lib"
export MUSER_CUDA_TESTS=1 MUSER_CUDA_REPORT="$out/report.jsonl"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$out/results.txt"

# The same file names as test_cuda_engine.py's fixture, so its smollm2 Q4_0 cell reuses the file.
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

log "ops tests"
timeout "$(cap 90)" python3 -m pytest tests/cuda/test_cuda_ops.py -q -p no:cacheprovider -rf --maxfail=30 \
  --junitxml="$out/ops.xml" 2>&1 | tail -40 | tee -a "$out/results.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "OPS TESTS FAILED (or timed out)"; }

log "matvec alone (bench_cuda_matvec.py; before the decode configs, 1 row: 51-56% on the big shapes)"
timeout "$(cap 70)" python3 -u benchmarks/bench_cuda_matvec.py --reps 30 2>&1 | tee -a "$out/results.txt"

wait $gen || { log "model generation failed:"; tail -5 "$out/gen.log" | tee -a "$out/results.txt"; }
bench_dir=/tmp/muser-bench; mkdir -p "$bench_dir"
for m in smollm2-135m-Q4_0 llama3-8b-Q4_0; do ln -sf "$models/spread-$m.gguf" "$bench_dir/$m.gguf"; done

# The engine suite without its llama3-8b Q4_K real-shape cell (writing and running that model on
# the CPU takes minutes; the smollm2 real shapes and the tiny models keep parity and invariance).
log "engine tests"
timeout "$(cap 80)" python3 -m pytest tests/cuda/test_cuda_engine.py -q -p no:cacheprovider -rf --maxfail=30 \
  -k "not llama3" --junitxml="$out/engine.xml" 2>&1 | tail -40 | tee -a "$out/results.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "ENGINE TESTS FAILED (or timed out)"; }

log "bench_cuda.py (before: llama3-8b Q4_0 335/528/739 tok/s at 1/2/4 rows; llama.cpp 334/602/942)"
timeout "$(cap 60)" python3 -u benchmarks/bench_cuda.py "$bench_dir/llama3-8b-Q4_0.gguf" \
  "$bench_dir/smollm2-135m-Q4_0.gguf" 2>&1 | tee -a "$out/results.txt"

log "step profile, llama3-8b Q4_0"
timeout "$(left)" python3 -u benchmarks/bench_cuda_step_profile.py "$bench_dir/llama3-8b-Q4_0.gguf" --top 12 \
  2>&1 | tee -a "$out/results.txt"

log "done, status $status"
exit $status
