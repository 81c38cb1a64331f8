#include "backend/cpu/ops_attention.h"

#include <cmath>
#include <limits>

namespace muser::cpu {

void attend(const float* q, const KvCache& kv, const AttentionHead& head, size_t first, size_t last,
            const F16VecOps& ops, float* scores, float* out) {
  const size_t n = last - first + 1;
  float max_score = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* k = kv.k_row(head.layer, first + i) + head.k_offset;
    float s = ops.dot(q, k, head.head_dim_k) * head.scale;
    scores[i] = s;
    if (s > max_score) max_score = s;
  }
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float e = std::exp(scores[i] - max_score);
    scores[i] = e;
    sum += e;
  }
  for (size_t d = 0; d < head.head_dim_v; ++d) out[d] = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* v = kv.v_row(head.layer, first + i) + head.v_offset;
    ops.axpy(out, scores[i], v, head.head_dim_v);
  }
  const float inv_sum = 1.0f / sum;
  for (size_t d = 0; d < head.head_dim_v; ++d) out[d] *= inv_sum;
}

}  // namespace muser::cpu
