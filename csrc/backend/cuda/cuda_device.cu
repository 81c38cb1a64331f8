// Whether this process can use a CUDA device, asked once: a build with the
// toolkit still runs on machines without a driver or a GPU (CI, laptops), and
// must say so instead of failing.
#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "backend/accelerators.h"

namespace muser {

BackendAvailability cuda_availability() {
  static std::once_flag once;
  static BackendAvailability availability;
  std::call_once(once, [] {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaSuccess && count > 0) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        availability = {true, std::string("device 0: ") + prop.name};
        return;
      }
    }
    cudaGetLastError();  // leave no sticky status behind for later calls
    if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
      availability = {false, "no CUDA device"};
    } else if (err == cudaErrorInsufficientDriver) {
      availability = {false, "no CUDA device (the NVIDIA driver is missing or older than the CUDA runtime)"};
    } else {
      availability = {false, std::string("no CUDA device (") + cudaGetErrorString(err) + ")"};
    }
  });
  return availability;
}

}  // namespace muser
