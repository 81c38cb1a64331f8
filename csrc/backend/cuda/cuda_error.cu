#include "backend/cuda/cuda_error.h"

#include <cuda_runtime.h>

#include "core/error.h"

namespace muser::cuda {

void check_cuda(int status, const char* what) {
  const cudaError_t err = static_cast<cudaError_t>(status);
  if (err == cudaSuccess) return;
  const std::string message = std::string("[cuda] ") + what + ": " + cudaGetErrorName(err) + " (" +
                              cudaGetErrorString(err) + ")";
  if (err == cudaErrorMemoryAllocation) {
    // Clear the (non-sticky) error so the next call starts clean.
    cudaGetLastError();
    throw DeviceMemoryError(message);
  }
  throw InternalError(message);
}

void check_launch(const char* kernel) { check_cuda(static_cast<int>(cudaGetLastError()), kernel); }

}  // namespace muser::cuda
