#include "backend/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <mutex>

#include "backend/cuda/cuda_error.h"

namespace muser::cuda {
namespace {

int device_attribute(cudaDeviceAttr attribute, const char* what) {
  int device = 0, value = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&value, attribute, device), what);
  return value;
}

}  // namespace

std::string probe_device() {
  static std::once_flag once;
  static std::string reason;
  std::call_once(once, [] {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    cudaGetLastError();  // leave no sticky status behind for later calls
    if (err == cudaSuccess && count > 0) return;
    if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
      reason = "no CUDA device";
    } else if (err == cudaErrorInsufficientDriver) {
      reason = "no CUDA device (the NVIDIA driver is missing or older than the CUDA runtime)";
    } else {
      reason = std::string("no CUDA device (") + cudaGetErrorString(err) + ")";
    }
  });
  return reason;
}

size_t shared_memory_per_block_optin() {
  static const size_t bytes = [] {
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
      cudaGetLastError();  // no sticky status for later calls
      return size_t{0};
    }
    return static_cast<size_t>(optin);
  }();
  return bytes;
}

int multiprocessor_count() {
  static const int count =
      device_attribute(cudaDevAttrMultiProcessorCount, "cudaDeviceGetAttribute(MultiProcessorCount)");
  return count;
}

size_t shared_memory_per_multiprocessor() {
  static const size_t bytes = static_cast<size_t>(device_attribute(
      cudaDevAttrMaxSharedMemoryPerMultiprocessor, "cudaDeviceGetAttribute(MaxSharedMemoryPerMultiprocessor)"));
  return bytes;
}

}  // namespace muser::cuda
