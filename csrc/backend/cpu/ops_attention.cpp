#include "backend/cpu/ops_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace muser::cpu {

size_t attention_scratch_floats(size_t n_queries, size_t span, size_t head_dim_k, size_t head_dim_v) {
  return n_queries * span + head_dim_k + head_dim_v;
}

void attend_block(const KvPlanes& kv, const AttentionKv& head, const AttentionQuery* queries, size_t n_queries,
                  const F16VecOps& ops, float* scratch) {
  size_t lowest = std::numeric_limits<size_t>::max();
  size_t highest = 0;
  for (size_t b = 0; b < n_queries; ++b) {
    lowest = std::min(lowest, queries[b].first);
    highest = std::max(highest, queries[b].last);
  }
  const size_t span = highest - lowest + 1;
  float* key = scratch + n_queries * span;  // one K row as float32
  float* value = key + head.head_dim_k;     // one V row as float32
  // scores of query b for position p live at scratch[b * span + (p - lowest)].

  for (size_t p = lowest; p <= highest; ++p) {
    ops.to_f32(kv.k(p) + head.k_offset, key, head.head_dim_k);
    for (size_t b = 0; b < n_queries; ++b) {
      const AttentionQuery& query = queries[b];
      if (p < query.first || p > query.last) continue;
      scratch[b * span + (p - lowest)] = ops.dot(query.q, key, head.head_dim_k) * head.scale;
    }
  }

  // Softmax of each query over its own positions, ascending.
  for (size_t b = 0; b < n_queries; ++b) {
    const AttentionQuery& query = queries[b];
    float* scores = scratch + b * span + (query.first - lowest);
    const size_t n = query.last - query.first + 1;
    float max_score = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) max_score = scores[i] > max_score ? scores[i] : max_score;
    float sum = 0.0f;
    for (size_t i = 0; i < n; ++i) {
      scores[i] = std::exp(scores[i] - max_score);
      sum += scores[i];
    }
    // Fold the normalization into the weights so the weighted sum needs no
    // second pass over the output.
    const float inv_sum = 1.0f / sum;
    for (size_t i = 0; i < n; ++i) scores[i] *= inv_sum;
    std::fill(query.out, query.out + head.head_dim_v, 0.0f);
  }

  for (size_t p = lowest; p <= highest; ++p) {
    ops.to_f32(kv.v(p) + head.v_offset, value, head.head_dim_v);
    for (size_t b = 0; b < n_queries; ++b) {
      const AttentionQuery& query = queries[b];
      if (p < query.first || p > query.last) continue;
      ops.axpy(query.out, scratch[b * span + (p - lowest)], value, head.head_dim_v);
    }
  }
}

}  // namespace muser::cpu
