// Scaled dot-product attention of one query head over the f16 KV cache.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/vec_f16.h"
#include "model/kv_cache.h"

namespace muser::cpu {

struct AttentionHead {
  uint32_t layer = 0;
  size_t k_offset = 0;   // offset of the KV head within a K row (kv_head * head_dim_k)
  size_t v_offset = 0;   // offset of the KV head within a V row (kv_head * head_dim_v)
  size_t head_dim_k = 0;
  size_t head_dim_v = 0;
  float scale = 1.0f;    // multiplies q.k
};

// out (head_dim_v floats) = sum_p softmax_p(scale * q . K[p]) * V[p] over
// positions p in [first, last] of `kv` (all intact). scores: scratch of at
// least last - first + 1 floats. Positions are visited in ascending order in
// every pass, so the result depends only on q and the cache contents.
void attend(const float* q, const KvCache& kv, const AttentionHead& head, size_t first, size_t last,
            const F16VecOps& ops, float* scores, float* out);

}  // namespace muser::cpu
