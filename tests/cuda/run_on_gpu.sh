#!/usr/bin/env bash
# Builds muser with the CUDA backend and runs every GPU test on this machine
# (it needs an NVIDIA GPU, nvcc, cmake, ninja, python3 with numpy, nanobind,
# pytest, hypothesis and gguf), then prints one table of the results.
#
#   bash tests/cuda/run_on_gpu.sh            # from the repository root
#
# Runs: tests/cuda/ (each op vs the scalar reference, CPU-vs-CUDA parity on
# tiny models and random-weight real shapes, bitwise batch and chunking
# invariance, typed out-of-memory errors) and the exactness and failure
# suites of tests/ with backend="auto", which picks CUDA here (their cases on
# the real downloaded models are deselected: the GPU machine has no network).
# Outputs land in $OUT (default /tmp/muser-cuda): build.log, junit XML,
# report.jsonl; the exit status is non-zero if anything failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
out="${OUT:-/tmp/muser-cuda}"
mkdir -p "$out"
py="${PYTHON:-python3}"

echo "== build (CUDA ON, sm_90)"
start=$(date +%s)
if ! { cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMUSER_CUDA=ON \
         -DMUSER_CUDA_ARCHITECTURES=90-real -DPython_EXECUTABLE="$(command -v "$py")" &&
       cmake --build build/cuda -j "$(nproc)"; } >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "BUILD FAILED"
  exit 1
fi
cp build/cuda/_core*.so src/muser/
echo "built in $(( $(date +%s) - start )) s"

export PYTHONPATH="$root/src:$root${PYTHONPATH:+:$PYTHONPATH}"
export MUSER_CUDA_TESTS=1 MUSER_CUDA_REPORT="$out/report.jsonl"
rm -f "$MUSER_CUDA_REPORT"
status=0
"$py" -m pytest tests/cuda -q -rf -p no:cacheprovider --junitxml="$out/cuda.xml" --maxfail=30 || status=1
"$py" -m pytest -q -p no:cacheprovider --maxfail=30 --junitxml="$out/suites.xml" \
  tests/property/test_exactness.py tests/integration/test_session_exactness.py \
  tests/integration/test_session_failures.py tests/integration/test_tiny_model_logits.py -rf \
  -k "not smollm2 and not gemma3_real" || status=1
"$py" tests/cuda/print_table.py "$out/cuda.xml" "$out/suites.xml" "$MUSER_CUDA_REPORT" || status=1
exit $status
