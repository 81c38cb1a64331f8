// CUDA runtime errors -> the core's typed errors. Out of device memory
// becomes DeviceMemoryError (Python MemoryError subclass); any other failure
// is InternalError naming the call, since it means a broken invariant or a
// lost device, never bad user input.
#pragma once

#include <string>

namespace muser::cuda {

// Throws when `status` (a cudaError_t as int) is not success. `what` names
// the call for the message.
void check_cuda(int status, const char* what);

// Checks the last kernel launch (cudaGetLastError).
void check_launch(const char* kernel);

}  // namespace muser::cuda
