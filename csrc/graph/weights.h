// The weights a model's graphs read, bound once per engine. A backend's
// load_weights() sees this table once and decides where each weight lives
// (the CPU reads the mmap in place; a GPU backend uploads once).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace muser {

struct WeightDesc {
  std::string name;            // the GGUF tensor name
  DType type = DType::F32;
  uint64_t ne[2] = {0, 1};     // ggml order: ne[0] = row length, ne[1] = rows (1 for vectors)
  uint32_t n_dims = 1;         // 1: vector (norm, bias, RoPE divisors), 2: matrix
  const uint8_t* data = nullptr;  // host bytes (the mapping); valid for the engine's life
  size_t n_bytes = 0;
  // Read only through row lookups (an embedding table with its own output
  // matrix beside it): no graph multiplies by it, so a backend need not
  // prepare it for products.
  bool lookup_only = false;
};

class WeightTable {
 public:
  // Adds a weight and returns its index. The same tensor bound twice (a
  // tied output matrix is the embedding) gets one index.
  uint32_t add(const WeightDesc& w) {
    for (uint32_t i = 0; i < weights_.size(); ++i) {
      const WeightDesc& o = weights_[i];
      if (o.name == w.name && o.data == w.data && o.type == w.type && o.n_dims == w.n_dims &&
          o.ne[0] == w.ne[0] && o.ne[1] == w.ne[1]) {
        return i;
      }
    }
    weights_.push_back(w);
    return static_cast<uint32_t>(weights_.size() - 1);
  }
  void mark_lookup_only(uint32_t i) { weights_[i].lookup_only = true; }
  const WeightDesc& operator[](uint32_t i) const { return weights_[i]; }
  size_t size() const { return weights_.size(); }

 private:
  std::vector<WeightDesc> weights_;
};

}  // namespace muser
