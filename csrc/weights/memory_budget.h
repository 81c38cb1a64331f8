// The memory a model file implies, checked against what the machine has
// before anything is built from it.
//
// A model's tensor data is read by every forward pass, so it must fit in
// memory to run (the mapping is lazy, but a model larger than memory pages
// for ever); backends also keep float32 copies of the 1-D tensors (norm
// vectors, biases). Tensors may not overlap (GgufFile checks), so these
// bytes are bounded by the file size; this check relates them to the machine.
#pragma once

#include <cstdint>

namespace muser {

class GgufFile;

struct ModelMemory {
  uint64_t tensor_bytes = 0;      // all tensor data as stored
  uint64_t f32_copy_bytes = 0;    // float32 copies of the 1-D tensors
  uint64_t total() const { return tensor_bytes + f32_copy_bytes; }
};

ModelMemory model_memory(const GgufFile& file);

// The limit: the environment variable MUSER_MAX_MODEL_BYTES when set (a
// byte count; InvalidArgument when it is not one), else physical memory.
uint64_t model_memory_limit();

// Throws ModelFormatError naming both figures and the limit when the model
// needs more than model_memory_limit().
void check_model_memory(const GgufFile& file);

}  // namespace muser
