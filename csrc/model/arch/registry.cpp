// The architecture registry: filled by the static ArchRegistration of each
// file in model/arch/ before main (the engine is an object library, so no
// registration is dropped by the linker).
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "model/arch/architecture.h"

namespace muser {
namespace {

std::vector<ArchEntry>& entries() {
  static std::vector<ArchEntry> all;
  return all;
}

}  // namespace

ArchRegistration::ArchRegistration(std::vector<const char*> names, const char* family, ArchFactory factory) {
  for (const char* name : names) entries().push_back(ArchEntry{name, family, factory});
}

const ArchEntry& find_arch(std::string_view general_architecture) {
  for (const ArchEntry& entry : entries()) {
    if (entry.name == general_architecture) return entry;
  }
  throw ModelFormatError(format_where(
      "model", "unsupported architecture: key 'general.architecture' is '" + std::string(general_architecture) +
                   "', expected one of " + supported_arch_names()));
}

std::string supported_arch_names() {
  std::vector<std::string> names;
  for (const ArchEntry& entry : entries()) names.push_back(entry.name);
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace muser
