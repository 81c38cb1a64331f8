// This build has no Metal and no CUDA backend yet (the interface they will
// implement is backend/backend.h). Until they exist, asking for one fails
// with a clear message instead of silently falling back to the CPU.
#include "backend/accelerators.h"

#include "core/error.h"

namespace muser {

std::vector<std::string> available_backends() { return {"cpu", "null"}; }

void throw_backend_unavailable(const std::string& name) {
  if (name == "metal") {
    throw InvalidArgument(
        "[engine] backend 'metal' is not available in this build: the Metal backend is built only on Apple "
        "platforms and is not part of this version; use backend='cpu' or 'auto'");
  }
  if (name == "cuda") {
    throw InvalidArgument(
        "[engine] backend 'cuda' is not available in this build: no CUDA toolkit was used to build muser; "
        "use backend='cpu' or 'auto'");
  }
  throw InvalidArgument("[engine] backend: expected 'auto', 'cpu', 'null', 'metal' or 'cuda', got '" + name + "'");
}

}  // namespace muser
