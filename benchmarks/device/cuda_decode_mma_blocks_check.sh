#!/usr/bin/env bash
# The tensor-core decode matvec on the GGUF blocks (MUSER_CUDA_DECODE_MMA_BLOCKS=1), checked and measured in one
# short call, the most telling parts first: the build, its op tests (bitwise the prefill tiles, every split; its
# refusals), the decode cells of llama3-8b Q4_0 and smollm2-135m Q4_0 on the blocks and on the packed copy
# (bench_cuda.py --decode-only), the engine's decode-trace test (blocks, packed, dp4a: the same bits), then the rest
# of tests/cuda while DEADLINE (default 300 s) lasts:
#
#   DEADLINE=300 bash benchmarks/device/cuda_decode_mma_blocks_check.sh      (repository root; $PYLIB carried)
export BENCH_MODELS=${BENCH_MODELS:-llama3-8b-Q4_0 smollm2-135m-Q4_0}
export DEADLINE=${DEADLINE:-300}
. "$(dirname "$0")/cuda_common.sh"
bench_models_ready
log "op tests (tensor-core decode)"
pytest_phase ops-mma 60 ops_mma.xml tests/cuda/test_cuda_ops.py -k tensor_core_decode
bench_decode 45 MUSER_CUDA_DECODE_MMA_BLOCKS=1
bench_decode 45 MUSER_CUDA_DECODE_MMA_BLOCKS=0
log "engine decode-trace test"
pytest_phase engine-mma 120 engine_mma.xml \
  "tests/cuda/test_cuda_engine.py::test_decode_groups_on_the_tensor_cores_keep_the_bits_of_the_dp4a_kernels"
log "the rest of tests/cuda"
pytest_phase cuda-rest 300 cuda_rest.xml tests/cuda -k "not tensor_core_decode and not keep_the_bits_of_the_dp4a"
log "done, status $status"
exit $status
