# Sourced by the CUDA device checks beside it (cuda_decode_check.sh, cuda_matvec_check.sh, cuda_gemm_check.sh):
#   . "$(dirname "$0")/cuda_common.sh"
# Sets root, lib ($PYLIB: the pure-Python packages the device image lacks, default .cudawork/lead/pylib),
# out ($OUT), deadline ($DEADLINE seconds for the whole check, default 300), models, bench_dir and status; el,
# left, cap and log time the phases. Then starts what every check needs: the random-weight real-shape models
# $BENCH_MODELS (default "smollm2-135m-Q4_0 llama3-8b-Q4_0"; bench_files lists their paths) written in the
# background (the file names of test_cuda_engine.py's fixture, so its smollm2 Q4_0 cell reuses them), and the
# CUDA build (sm_90) into build/cuda, its extension copied into src/muser; a failed build ends the check with
# status 1.
set -uo pipefail
root=$(pwd); lib=${PYLIB:-$root/.cudawork/lead/pylib}
out=${OUT:-/tmp/out}; mkdir -p "$out"
deadline=${DEADLINE:-300}
models=${MUSER_CUDA_MODELS:-/tmp/muser-cuda-models}; mkdir -p "$models"
bench_dir=/tmp/muser-bench
bench_models=${BENCH_MODELS:-smollm2-135m-Q4_0 llama3-8b-Q4_0}
bench_files=""; for m in $bench_models; do bench_files="$bench_files $bench_dir/$m.gguf"; done
export MUSER_CUDA_MODELS="$models"
start=$(date +%s); el() { echo $(( $(date +%s) - start )); }
left() { local l=$(( deadline - $(el) )); echo $(( l > 1 ? l : 1 )); }  # timeout 0 would mean none
cap() { local l; l=$(left); echo $(( l < $1 ? l : $1 )); }             # min(phase cap, budget left)
log() { echo "[$(el) s] $*" | tee -a "$out/results.txt"; }
status=0

# pytest_phase LABEL CAP XML PYTEST_ARGS...: one test phase under min(CAP, budget left), junit XML to
# $out/XML, its last 40 lines into results.txt; a failure (or running out of time) marks the check failed and
# the later phases still run.
pytest_phase() {
  local label=$1 phase_cap=$2 xml=$3
  shift 3
  timeout "$(cap "$phase_cap")" python3 -m pytest "$@" -q -p no:cacheprovider -rf --junitxml="$out/$xml" 2>&1 |
    tail -40 | tee -a "$out/results.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "$label FAILED (or timed out)"; }
}

# bench_decode CAP [VAR=VALUE ...]: bench_cuda.py's decode cells of $bench_files under min(CAP, budget left)
# with those environment settings (the default's without), into results.txt.
bench_decode() {
  local phase_cap=$1
  shift
  log "bench ${*:-default}"
  env "$@" timeout "$(cap "$phase_cap")" python3 -u benchmarks/bench_cuda.py $bench_files --decode-only 2>&1 |
    grep -v -i warn | tee -a "$out/results.txt"
}

# Waits for the models and links them into $bench_dir under the names the benchmarks take.
bench_models_ready() {
  wait "$gen" || { log "model generation failed:"; tail -5 "$out/gen.log" | tee -a "$out/results.txt"; }
  mkdir -p "$bench_dir"
  local m
  for m in $bench_models; do ln -sf "$models/spread-$m.gguf" "$bench_dir/$m.gguf"; done
}

export PYTHONPATH="$root/src:$root:$lib"
export MUSER_CUDA_TESTS=1 MUSER_CUDA_REPORT="$out/report.jsonl"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$out/results.txt"

python3 - "$models" $bench_models > "$out/gen.log" 2>&1 <<'PY' &
import sys
from tests.cuda.random_real_shapes import write_real_shape
for name in sys.argv[2:]:
    shape, qtype = name.rsplit("-", 1)
    write_real_shape(f"{sys.argv[1]}/spread-{name}.gguf", shape, qtype)
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
