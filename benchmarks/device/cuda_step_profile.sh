#!/usr/bin/env bash
# Where a CUDA decode step's time goes on the H200 (benchmarks/bench_cuda_step_profile.py): builds
# muser with CUDA into build/cuda, writes llama3-8b Q4_0 and smollm2-135m Q4_0 random-weight models,
# and prints wall vs GPU-kernel time per step with the kernels ranked, at 1 and 4 rows.
#   bash benchmarks/device/cuda_step_profile.sh        (from the repository root, $PYLIB carried)
# Output: $OUT/cuda-profile.txt.
set -uo pipefail
root=$(pwd); lib=${PYLIB:-$root/.cudawork/lead/pylib}; out=${OUT:-/tmp/out}; mkdir -p "$out"
models=/tmp/muser-cuda-models; mkdir -p "$models"
export PYTHONPATH="$root/src:$root:$lib"
( python3 - "$models" <<'PY'
import sys
from tests.cuda.random_real_shapes import write_real_shape
for shape, qtype in (("llama3-8b", "Q4_0"), ("smollm2-135m", "Q4_0")):
    write_real_shape(f"{sys.argv[1]}/{shape}-{qtype}.gguf", shape, qtype)
PY
) > "$out/gen.log" 2>&1 &
cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMUSER_CUDA=ON -DMUSER_CUDA_ARCHITECTURES=90-real \
  -DPython_EXECUTABLE="$(command -v python3)" > "$out/build-cuda.log" 2>&1 &&
  cmake --build build/cuda -j "$(nproc)" >> "$out/build-cuda.log" 2>&1 || { tail -20 "$out/build-cuda.log"; exit 1; }
cp build/cuda/_core*.so src/muser/
wait
for m in llama3-8b-Q4_0 smollm2-135m-Q4_0; do
  timeout 120 python3 -u benchmarks/bench_cuda_step_profile.py "$models/$m.gguf" 2>&1 | tee -a "$out/cuda-profile.txt"
done
