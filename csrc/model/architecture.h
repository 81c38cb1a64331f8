// The model families muser can run, and how a GGUF `general.architecture`
// string maps onto them. One forward graph serves all of them; the family
// only decides which hyperparameters, tensors and options apply.
#pragma once

#include <string>
#include <string_view>

namespace muser {

enum class Arch {
  Llama,   // llama, mistral (and SmolLM2, which is a llama)
  Qwen2,   // biases on Q, K and V
  Qwen3,   // RMSNorm on each query/key head before RoPE
  Gemma3,  // sliding-window local layers, GeGLU, pre+post norms, scaled embedding
};

// The family of an architecture string, or throws ModelFormatError naming
// the string and listing the supported ones.
Arch parse_arch(std::string_view general_architecture);

const char* arch_family_name(Arch arch);

// Comma-separated architecture strings accepted by parse_arch, for messages.
std::string supported_arch_names();

}  // namespace muser
