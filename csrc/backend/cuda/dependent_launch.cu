#include "backend/cuda/dependent_launch.cuh"

#include <cstdlib>
#include <cstring>

namespace muser::cuda {

bool dependent_launch_enabled() {
  // Once per process: like the CPU's instruction-set choice, a property of
  // the machine (and of one switch for ruling it out), not of a call.
  static const bool enabled = [] {
    const char* env = std::getenv("MUSER_CUDA_PDL");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    return major >= 9;
  }();
  return enabled;
}

}  // namespace muser::cuda
