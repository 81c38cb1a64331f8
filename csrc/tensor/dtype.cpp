#include "tensor/dtype.h"

#include <array>

#include "core/error.h"

namespace muser {
namespace {

constexpr std::array<DTypeInfo, 13> kSupported = {{
    {DType::F32, "F32", 1, 4},
    {DType::F16, "F16", 1, 2},
    {DType::BF16, "BF16", 1, 2},
    {DType::Q4_0, "Q4_0", 32, 18},
    {DType::Q4_1, "Q4_1", 32, 20},
    {DType::Q5_0, "Q5_0", 32, 22},
    {DType::Q5_1, "Q5_1", 32, 24},
    {DType::Q8_0, "Q8_0", 32, 34},
    {DType::Q2_K, "Q2_K", 256, 84},
    {DType::Q3_K, "Q3_K", 256, 110},
    {DType::Q4_K, "Q4_K", 256, 144},
    {DType::Q5_K, "Q5_K", 256, 176},
    {DType::Q6_K, "Q6_K", 256, 210},
}};

struct KnownName {
  uint32_t id;
  const char* name;
};

// Types other tools write that we recognise only to name them in errors.
constexpr std::array<KnownName, 21> kOtherNames = {{
    {4, "Q4_2 (removed)"}, {5, "Q4_3 (removed)"}, {9, "Q8_1"},   {15, "Q8_K"},
    {16, "IQ2_XXS"},       {17, "IQ2_XS"},        {18, "IQ3_XXS"}, {19, "IQ1_S"},
    {20, "IQ4_NL"},        {21, "IQ3_S"},         {22, "IQ2_S"},   {23, "IQ4_XS"},
    {24, "I8"},            {25, "I16"},           {26, "I32"},     {27, "I64"},
    {28, "F64"},           {29, "IQ1_M"},         {34, "TQ1_0"},   {35, "TQ2_0"},
    {39, "MXFP4"},
}};

}  // namespace

const DTypeInfo* find_dtype(uint32_t id) {
  for (const auto& info : kSupported) {
    if (static_cast<uint32_t>(info.type) == id) return &info;
  }
  return nullptr;
}

const DTypeInfo& dtype_info(DType type) {
  const DTypeInfo* info = find_dtype(static_cast<uint32_t>(type));
  if (info == nullptr) throw InternalError("[dtype] unknown DType value");
  return *info;
}

std::string ggml_type_name(uint32_t id) {
  if (const DTypeInfo* info = find_dtype(id)) return info->name;
  for (const auto& known : kOtherNames) {
    if (known.id == id) return known.name;
  }
  return "type " + std::to_string(id);
}

std::string supported_dtype_names() {
  std::string names;
  for (const auto& info : kSupported) {
    if (!names.empty()) names += ", ";
    names += info.name;
  }
  return names;
}

uint64_t row_bytes(DType type, uint64_t n_elems) {
  const DTypeInfo& info = dtype_info(type);
  return n_elems / info.block_elems * info.block_bytes;
}

}  // namespace muser
