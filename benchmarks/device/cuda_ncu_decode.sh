#!/usr/bin/env bash
# Nsight Compute on the kernels of one llama3-8b Q4_0 decode step at ROWS rows (default 4): the first layer's
# norm, q/k/v, attention, o, gate/up and down launches (at 2..4 rows the rope and the GLU run inside the q/k/v
# and gate/up launches, and o and down take the spread kernel from 3 rows), with the sections that say what
# bounds each (speed of light, memory, compute, warp states, scheduler, occupancy, instruction mix). About 3
# minutes:
#
#   bash benchmarks/device/cuda_ncu_decode.sh        (repository root, $PYLIB carried)
#
# Results: $OUT/ncu-rows$ROWS.txt (ncu's details page per kernel).
set -uo pipefail
root=$(pwd); lib=${PYLIB:-$root/.cudawork/lead/pylib}; out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONPATH="$root/src:$root:$lib"
model=/tmp/muser-ncu/llama3-8b-Q4_0.gguf; mkdir -p /tmp/muser-ncu
[ -f "$model" ] || python3 -c "from tests.cuda.random_real_shapes import write_real_shape as w; w('$model', 'llama3-8b', 'Q4_0')" &
gen=$!
cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMUSER_CUDA=ON -DMUSER_CUDA_ARCHITECTURES=90-real \
  -DPython_EXECUTABLE="$(command -v python3)" > "$out/build.log" 2>&1 &&
  cmake --build build/cuda -j "$(nproc)" >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
cp build/cuda/_core*.so src/muser/
wait "$gen" || { echo "model generation failed"; exit 1; }
cat > /tmp/muser-ncu/step.py <<PY
import numpy as np, muser
e = muser.Engine("$model", backend="cuda")
rows = ${ROWS:-4}
ss = [e.session(max_context=200) for _ in range(rows)]
prompt = [int(t) for t in np.random.default_rng(1).integers(300, e.n_vocab, 128)]
for s in ss: s.prefill(prompt)
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuProfilerStart()  # ncu starts here (--profile-from-start off): the decode steps only
for t in (1000, 1001): e.decode_group(ss, [t] * rows)  # capture and launch, then one replay
cuda.cuProfilerStop()
PY
ncu=/usr/local/cuda/bin/ncu; [ -x "$ncu" ] || ncu=ncu
timeout "${NCU_SECONDS:-150}" "$ncu" --clock-control none --graph-profiling node --profile-from-start off \
  -k regex:"matvec_(decode|spread)_kernel|rms_norm_(blocks|vec)_kernel|attention_partial_kernel" \
  --launch-skip "${SKIP:-0}" --launch-count "${COUNT:-7}" --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats \
  python3 /tmp/muser-ncu/step.py > "$out/ncu-rows${ROWS:-4}.txt" 2>&1
echo "ncu rc $?"; grep -E "matvec_(decode|spread)_kernel|rms_norm|attention_partial|Duration|Memory Throughput|DRAM Throughput|Issue Slots Busy|Eligible Warps|Achieved Occupancy|Registers Per|No Eligible" "$out/ncu-rows${ROWS:-4}.txt" | cut -c1-150
