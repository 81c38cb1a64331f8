// Whether this process can use a CUDA device.
#pragma once

#include <string>

namespace muser::cuda {

// "" when device 0 is usable, else why not ("no CUDA device", ...). Asked
// once per process (cached): a build with the toolkit still runs on machines
// without a driver or a GPU (CI, laptops) and must say so instead of failing.
std::string probe_device();

}  // namespace muser::cuda
