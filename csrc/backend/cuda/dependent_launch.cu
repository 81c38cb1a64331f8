#include "backend/cuda/dependent_launch.cuh"

#include "core/env_switch.h"

namespace muser::cuda {

bool dependent_launch_enabled() {
  // Once per process: like the CPU's instruction-set choice, a property of
  // the machine (and of one switch for ruling it out), not of a call.
  static const bool enabled = [] {
    if (env_is("MUSER_CUDA_PDL", "0")) return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    return major >= 9;
  }();
  return enabled;
}

}  // namespace muser::cuda
