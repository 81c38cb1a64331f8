// Which accelerator backends this build of muser contains and whether they
// can run here. Backends that are not built report themselves unavailable
// here instead of #ifdefs at call sites (the shape MLX uses with
// no_metal.cpp): csrc/backend/no_cuda.cpp stands in for csrc/backend/cuda/
// in builds without a CUDA toolkit.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace muser {

class Backend;
struct Model;

// Names accepted by EngineOptions::backend that this build can run.
std::vector<std::string> available_backends();

// Throws InvalidArgument explaining why `name` ("metal", "cuda") cannot run here.
[[noreturn]] void throw_backend_unavailable(const std::string& name);

struct BackendAvailability {
  bool usable = false;
  std::string reason;  // why not, when !usable ("compiled without CUDA", "no CUDA device")
};

// Whether the CUDA backend can run in this process: compiled in, a driver,
// and at least one device. Cheap after the first call (cached).
BackendAvailability cuda_availability();

// The CUDA backend for `model` on device 0: uploads the weights once. Throws
// InvalidArgument when cuda_availability() is not usable, DeviceMemoryError
// when the weights do not fit, ModelFormatError for a shape it cannot run.
std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Model> model);

}  // namespace muser
