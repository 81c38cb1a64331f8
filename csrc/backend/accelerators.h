// Which accelerator backends this build of muser contains. Backends that are
// not built report themselves unavailable here instead of #ifdefs at call
// sites (the shape MLX uses with no_metal.cpp).
#pragma once

#include <string>
#include <vector>

namespace muser {

// Names accepted by EngineOptions::backend that this build can run.
std::vector<std::string> available_backends();

// Throws InvalidArgument explaining why `name` ("metal", "cuda") cannot run here.
[[noreturn]] void throw_backend_unavailable(const std::string& name);

}  // namespace muser
