// The tensor element types muser reads from GGUF, with their ggml type ids and
// block geometry. Block layouts themselves live in tensor/quant_blocks.h.
#pragma once

#include <cstdint>
#include <string>

namespace muser {

// Values are ggml's on-disk type ids (GGUF stores these numbers).
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30,
};

struct DTypeInfo {
  DType type;
  const char* name;
  uint32_t block_elems;  // elements per block (1 for plain floats)
  uint32_t block_bytes;  // bytes per block
};

// Null when `id` is not a type muser can compute with.
const DTypeInfo* find_dtype(uint32_t id);
const DTypeInfo& dtype_info(DType type);

// ggml's name for any type id, including ones muser does not support
// ("IQ2_XXS"), or "type <id>" for ids nobody knows. For error messages.
std::string ggml_type_name(uint32_t id);

// Comma-separated names of the supported types, for error messages.
std::string supported_dtype_names();

// Bytes of one row of `n_elems` elements; n_elems must be a block multiple.
uint64_t row_bytes(DType type, uint64_t n_elems);

}  // namespace muser
