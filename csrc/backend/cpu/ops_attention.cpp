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
  // scores of query b for position p live at scratch[b * span + (p - lowest)].

  // Each query's scores over runs of keys adjacent in memory (the values
  // do not depend on how positions are grouped into runs or on the order
  // of the queries).
  for (size_t b = 0; b < n_queries; ++b) {
    const AttentionQuery& query = queries[b];
    float* scores = scratch + b * span + (query.first - lowest);
    for (size_t p = query.first; p <= query.last;) {
      const size_t n = kv.run(p, query.last + 1 - p);
      ops.dot_rows(query.q, kv.k(p) + head.k_offset, kv.k_stride(), n, head.head_dim_k, head.scale,
                   scores + (p - query.first));
      p += n;
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

  // Weighted values, positions ascending for each output element.
  for (size_t b = 0; b < n_queries; ++b) {
    const AttentionQuery& query = queries[b];
    const float* weights = scratch + b * span + (query.first - lowest);
    for (size_t p = query.first; p <= query.last;) {
      const size_t n = kv.run(p, query.last + 1 - p);
      ops.axpy_rows(query.out, weights + (p - query.first), kv.v(p) + head.v_offset, kv.v_stride(), n,
                    head.head_dim_v);
      p += n;
    }
  }
}

}  // namespace muser::cpu
