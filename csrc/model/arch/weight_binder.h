// Looks a model's tensors up by name, checks them against the shapes the
// hyperparameters imply, and adds them to the WeightTable the graphs read.
#pragma once

#include <cstdint>
#include <string>

#include "graph/weights.h"
#include "weights/gguf_file.h"

namespace muser {

// Index of an absent optional weight.
constexpr uint32_t kNoWeight = ~uint32_t{0};

class WeightBinder {
 public:
  WeightBinder(const GgufFile& file, WeightTable& table) : file_(file), table_(table) {}

  // A matrix in ggml order: ne[0] = inputs, ne[1] = outputs. Any weight type.
  uint32_t matrix(const std::string& name, uint64_t n_in, uint64_t n_out);
  // A vector (norm weight, bias) the graph reads as floats (F32, F16 or BF16).
  uint32_t vector(const std::string& name, uint64_t n);
  // vector() when the file has the tensor, kNoWeight otherwise.
  uint32_t optional_vector(const std::string& name, uint64_t n);
  // Marks a bound matrix as read only by row lookups (WeightDesc::lookup_only).
  void lookup_only(uint32_t index) { table_.mark_lookup_only(index); }
  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

  static std::string layer(uint32_t il, const char* what) { return "blk." + std::to_string(il) + "." + what; }

 private:
  const TensorInfo* require(const std::string& name, const uint64_t* dims, uint32_t n_dims) const;
  uint32_t add(const TensorInfo& t, uint32_t n_dims);

  const GgufFile& file_;
  WeightTable& table_;
};

}  // namespace muser
