// Programmatic dependent launch (Hopper and later): a kernel launched with
// launch_dependent may be scheduled while the kernel before it in the stream
// is still finishing, so its blocks sit resident and start the moment their
// predecessor's grid completes, instead of after a launch latency. A decode
// step is a chain of ~300 kernels of a few microseconds each, where that
// latency is a large share of the step.
//
// The contract, on both sides:
// - every kernel launched with launch_dependent calls dependent_launch_begin()
//   before it writes global memory or reads anything an earlier kernel
//   writes (reading the weights earlier is fine: they are uploaded once):
//   the wait there returns once the previous grid has completed and its
//   writes are visible;
// - the trigger right after the wait lets the next kernel be scheduled only
//   once this one is past its own wait, so at most one grid waits at a time
//   and completions stay in stream order (a kernel finishes after the one
//   before it, so anything older is complete too).
// Without the launch attribute (older GPUs, MUSER_CUDA_PDL=0, a normal
// launch) both instructions return at once and ordering is the stream's.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace muser::cuda {

__device__ __forceinline__ void dependent_launch_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launches carry the attribute: the current device is compute
// capability 9.0 or later and MUSER_CUDA_PDL is not "0" (read once).
bool dependent_launch_enabled();

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic
// serialization attribute when enabled. Check with check_launch afterwards.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = dependent_launch_enabled() ? 1 : 0;
  cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace muser::cuda
