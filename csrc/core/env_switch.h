// The environment switches muser reads (MUSER_CPU_AMX=0, MUSER_CUDA_PDL=0,
// the CUDA A/B switches): escape hatches and comparisons, each read once
// per process by the code it switches.
#pragma once

#include <cstdlib>
#include <cstring>

namespace muser {

// Whether environment variable `name` is set to exactly `value`.
inline bool env_is(const char* name, const char* value) {
  const char* set = std::getenv(name);
  return set != nullptr && std::strcmp(set, value) == 0;
}

}  // namespace muser
