#include "weights/memory_budget.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/checked_math.h"
#include "core/error.h"
#include "weights/gguf_file.h"

namespace muser {

ModelMemory model_memory(const GgufFile& file) {
  ModelMemory m;
  for (const TensorInfo& t : file.tensors()) {
    // No overflow: the tensors lie inside the file without overlapping.
    m.tensor_bytes += t.n_bytes;
    if (t.n_dims == 1) m.f32_copy_bytes += t.n_elements() * sizeof(float);
  }
  return m;
}

uint64_t model_memory_limit() {
  if (const char* text = std::getenv("MUSER_MAX_MODEL_BYTES")) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (*text == '\0' || *text == '-' || end == nullptr || *end != '\0' || errno == ERANGE) {
      throw InvalidArgument("[model] MUSER_MAX_MODEL_BYTES: expected a number of bytes, got '" +
                            std::string(text) + "'");
    }
    return value;
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  uint64_t bytes = 0;
  if (pages <= 0 || page_size <= 0 ||
      !checked_mul(static_cast<uint64_t>(pages), static_cast<uint64_t>(page_size), &bytes)) {
    return UINT64_MAX;  // unknown: no machine limit
  }
  return bytes;
}

void check_model_memory(const GgufFile& file) {
  const ModelMemory need = model_memory(file);
  const uint64_t limit = model_memory_limit();
  if (need.total() > limit) {
    const bool overridden = std::getenv("MUSER_MAX_MODEL_BYTES") != nullptr;
    throw ModelFormatError(format_where(
        "model", "the model needs " + std::to_string(need.total()) + " bytes of memory (" +
                     std::to_string(need.tensor_bytes) + " of tensor data and " +
                     std::to_string(need.f32_copy_bytes) + " of float32 copies of 1-D tensors), above the limit of " +
                     std::to_string(limit) + " bytes (" +
                     (overridden ? "MUSER_MAX_MODEL_BYTES" : "this machine's physical memory; set MUSER_MAX_MODEL_BYTES to change it") +
                     ")"));
  }
}

}  // namespace muser
