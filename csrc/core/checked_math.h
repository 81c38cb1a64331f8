// Overflow-checked size arithmetic for parsing untrusted files: every count
// read from disk goes through these before it sizes an allocation or a view.
#pragma once

#include <cstdint>
#include <limits>

namespace muser {

// Returns false (and leaves *out untouched) when a + b overflows.
inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) {
  if (a > std::numeric_limits<uint64_t>::max() - b) return false;
  *out = a + b;
  return true;
}

// Returns false (and leaves *out untouched) when a * b overflows.
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

inline uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace muser
