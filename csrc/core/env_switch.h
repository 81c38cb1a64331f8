// The environment switches muser reads (MUSER_CPU_AMX=0, MUSER_CUDA_PDL=0,
// the CUDA A/B switches): escape hatches and comparisons, each read by the
// code it switches once per process, or once per backend where tests make
// backends both ways in one process (MUSER_CUDA_FUSE,
// MUSER_CUDA_ATTENTION_GRID).
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
