// Whether this process can use a CUDA device.
#pragma once

#include <cstddef>
#include <string>

namespace muser::cuda {

// "" when device 0 is usable, else why not ("no CUDA device", ...). Asked
// once per process (cached): a build with the toolkit still runs on machines
// without a driver or a GPU (CI, laptops) and must say so instead of failing.
std::string probe_device();

// The shared memory one block of device 0 may take when its kernel opts in
// (cudaDevAttrMaxSharedMemoryPerBlockOptin: 227 KiB on compute capability
// 9.0, 163 KiB on 8.0, 99 KiB on 8.6 and 8.9), asked once per process; 0
// when it cannot be asked (no usable device). Kernels whose blocks need
// more take another path there.
size_t shared_memory_per_block_optin();

// Device 0's multiprocessors and the shared memory each holds for its
// blocks (cudaDevAttrMultiProcessorCount and
// cudaDevAttrMaxSharedMemoryPerMultiprocessor), asked once per process; a
// failed query throws as check_cuda does (only launchers ask, on a device).
int multiprocessor_count();
size_t shared_memory_per_multiprocessor();

}  // namespace muser::cuda
