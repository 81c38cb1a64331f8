#include "backend/cpu/ops_attention.h"

#include <algorithm>
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

  // Runs of keys adjacent in memory (one KV page), each run for every query
  // while it is in L1. A query's scores do not depend on how its positions
  // are grouped into runs or on the other queries.
  for (size_t p = lowest; p <= highest;) {
    const size_t end = p + kv.run(p, highest + 1 - p);
    const uint16_t* keys = kv.k(p) + head.k_offset;
    for (size_t b = 0; b < n_queries; ++b) {
      const AttentionQuery& query = queries[b];
      const size_t from = std::max(p, query.first);
      const size_t to = std::min(end, query.last + 1);
      if (from >= to) continue;
      ops.dot_rows(query.q, keys + (from - p) * kv.k_stride(), kv.k_stride(), to - from, head.head_dim_k,
                   head.scale, scratch + b * span + (from - lowest));
    }
    p = end;
  }

  // Softmax of each query over its own positions.
  for (size_t b = 0; b < n_queries; ++b) {
    const AttentionQuery& query = queries[b];
    ops.softmax(scratch + b * span + (query.first - lowest), query.last - query.first + 1);
    std::fill(query.out, query.out + head.head_dim_v, 0.0f);
  }

  // Weighted values, positions ascending for each output element, run by run.
  for (size_t p = lowest; p <= highest;) {
    const size_t end = p + kv.run(p, highest + 1 - p);
    const uint16_t* values = kv.v(p) + head.v_offset;
    for (size_t b = 0; b < n_queries; ++b) {
      const AttentionQuery& query = queries[b];
      const size_t from = std::max(p, query.first);
      const size_t to = std::min(end, query.last + 1);
      if (from >= to) continue;
      ops.axpy_rows(query.out, scratch + b * span + (from - lowest), values + (from - p) * kv.v_stride(),
                    kv.v_stride(), to - from, head.head_dim_v);
    }
    p = end;
  }
}

}  // namespace muser::cpu
