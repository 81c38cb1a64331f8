// This build has no Metal backend; the CUDA backend is there when a toolkit
// was found at build time (cuda_availability says whether it can run here).
// Asking for a backend that cannot run fails with a clear message instead of
// silently falling back to the CPU.
#include "backend/accelerators.h"

#include "core/error.h"

namespace muser {

std::vector<std::string> available_backends() {
  std::vector<std::string> names{"cpu", "null"};
  if (cuda_availability().usable) names.insert(names.begin(), "cuda");
  return names;
}

void throw_backend_unavailable(const std::string& name) {
  if (name == "metal") {
    throw InvalidArgument(
        "[engine] backend 'metal' is not available in this build: the Metal backend is built only on Apple "
        "platforms and is not part of this version; use backend='cpu' or 'auto'");
  }
  if (name == "cuda") {
    throw InvalidArgument("[engine] backend 'cuda' is not available: " + cuda_availability().reason +
                          "; use backend='cpu' or 'auto'");
  }
  throw InvalidArgument("[engine] backend: expected 'auto', 'cpu', 'null', 'metal' or 'cuda', got '" + name + "'");
}

}  // namespace muser
