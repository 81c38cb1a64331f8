#include "model/architecture.h"

#include <array>

#include "core/error.h"

namespace muser {
namespace {

struct ArchName {
  const char* name;
  Arch arch;
};

// "mistral" files written by older converters use the llama graph with their
// own key prefix.
constexpr std::array<ArchName, 5> kArchNames = {{
    {"llama", Arch::Llama},
    {"mistral", Arch::Llama},
    {"qwen2", Arch::Qwen2},
    {"qwen3", Arch::Qwen3},
    {"gemma3", Arch::Gemma3},
}};

}  // namespace

Arch parse_arch(std::string_view general_architecture) {
  for (const auto& entry : kArchNames) {
    if (general_architecture == entry.name) return entry.arch;
  }
  throw ModelFormatError(format_where(
      "model", "unsupported architecture: key 'general.architecture' is '" +
                   std::string(general_architecture) + "', expected one of " +
                   supported_arch_names()));
}

const char* arch_family_name(Arch arch) {
  switch (arch) {
    case Arch::Llama: return "llama";
    case Arch::Qwen2: return "qwen2";
    case Arch::Qwen3: return "qwen3";
    case Arch::Gemma3: return "gemma3";
  }
  return "unknown";
}

std::string supported_arch_names() {
  std::string names;
  for (const auto& entry : kArchNames) {
    if (!names.empty()) names += ", ";
    names += entry.name;
  }
  return names;
}

}  // namespace muser
