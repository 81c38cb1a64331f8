// The geometry of a model's KV: per layer the key and value row widths and
// whether the layer keeps every position (global) or only a sliding window
// (a ring of planes rows). Shared by every backend; a backend only decides
// where the bytes live (KvStorage).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/limits.h"

namespace muser {

struct KvLayerDesc {
  size_t k_width = 0;  // floats per key row (n_head_kv * head_dim_k)
  size_t v_width = 0;  // floats per value row (n_head_kv * head_dim_v)
  size_t window = 0;   // 0: global (position p in plane row p); else a ring
};

struct KvLayout {
  std::vector<KvLayerDesc> layers;

  // The sliding window shared by every ring layer (0 when none slides).
  size_t window() const;
  // Rows of a full ring for a sequence of max_context positions (0 when no
  // layer slides): min(max_context, window + kMaxStepRows - 1).
  size_t ring_rows(size_t max_context) const;
  bool has_global() const;
  bool has_ring() const;
};

}  // namespace muser
