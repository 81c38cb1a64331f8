#include "backend/cpu/ops_attention.h"

#include <algorithm>
#include <limits>

namespace muser::cpu {

namespace {

// Queries of a block from which attend_block converts cache rows to float32
// once for all of them (dot_rows_f32 / axpy_rows_f32, the same bits) rather
// than in registers once per query: a decode row's few query heads read a
// row too few times to repay the stores.
constexpr size_t kConvertMinQueries = 4;

// Queries over the same positions passed to one axpy_rows_f32 call.
constexpr size_t kMaxSharedQueries = 4;

// Rows converted at a time: about 16 KB of floats, so a chunk stays in L1
// while every query of the block reads it; a multiple of 16 rows (the
// 16-row reductions of the AVX-512 dot_rows).
size_t converted_rows(size_t head_dim) {
  const size_t rows = 4096 / std::max<size_t>(head_dim, 1) / 16 * 16;
  return std::max<size_t>(rows, 16);
}

}  // namespace

size_t attention_scratch_floats(size_t n_queries, size_t span, size_t head_dim_k, size_t head_dim_v) {
  const size_t width = std::max(head_dim_k, head_dim_v);
  return n_queries * span + converted_rows(width) * width;
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
  // After them: the float32 copy of a chunk of cache rows (when converting).
  float* converted = scratch + n_queries * span;
  const bool convert = n_queries >= kConvertMinQueries;
  const size_t dk = head.head_dim_k;
  const size_t dv = head.head_dim_v;
  const size_t chunk = convert ? converted_rows(std::max(dk, dv)) : std::numeric_limits<size_t>::max();

  // Runs of keys adjacent in memory (one KV page), cut into chunks, each
  // chunk for every query while it is in L1. A query's scores do not depend
  // on how its positions are grouped into runs and chunks, on whether the
  // rows were converted first, or on the other queries.
  for (size_t p = lowest; p <= highest;) {
    const size_t end = p + kv.run(p, highest + 1 - p);
    for (size_t c = p; c < end; c = c + std::min(chunk, end - c)) {
      const size_t c_end = c + std::min(chunk, end - c);
      const uint16_t* keys = kv.k(p) + head.k_offset + (c - p) * kv.k_stride();
      if (convert) {
        for (size_t r = 0; r < c_end - c; ++r) ops.to_f32(keys + r * kv.k_stride(), converted + r * dk, dk);
      }
      for (size_t b = 0; b < n_queries; ++b) {
        const AttentionQuery& query = queries[b];
        const size_t from = std::max(c, query.first);
        const size_t to = std::min(c_end, query.last + 1);
        if (from >= to) continue;
        float* scores = scratch + b * span + (from - lowest);
        if (convert) {
          ops.dot_rows_f32(query.q, converted + (from - c) * dk, dk, to - from, dk, head.scale, scores);
        } else {
          ops.dot_rows(query.q, keys + (from - c) * kv.k_stride(), kv.k_stride(), to - from, dk, head.scale, scores);
        }
      }
    }
    p = end;
  }

  // Softmax of each query over its own positions.
  for (size_t b = 0; b < n_queries; ++b) {
    const AttentionQuery& query = queries[b];
    ops.softmax(scratch + b * span + (query.first - lowest), query.last - query.first + 1);
    std::fill(query.out, query.out + dv, 0.0f);
  }

  // Weighted values, positions ascending for each output element, run by
  // run and chunk by chunk (the running sums pass through memory between
  // chunks unchanged).
  for (size_t p = lowest; p <= highest;) {
    const size_t end = p + kv.run(p, highest + 1 - p);
    for (size_t c = p; c < end; c = c + std::min(chunk, end - c)) {
      const size_t c_end = c + std::min(chunk, end - c);
      const uint16_t* values = kv.v(p) + head.v_offset + (c - p) * kv.v_stride();
      if (convert) {
        for (size_t r = 0; r < c_end - c; ++r) ops.to_f32(values + r * kv.v_stride(), converted + r * dv, dv);
      }
      for (size_t b = 0; b < n_queries;) {
        const AttentionQuery& query = queries[b];
        const size_t from = std::max(c, query.first);
        const size_t to = std::min(c_end, query.last + 1);
        if (from >= to) {
          ++b;
          continue;
        }
        if (!convert) {
          ops.axpy_rows(query.out, scratch + b * span + (from - lowest), values + (from - c) * kv.v_stride(),
                        kv.v_stride(), to - from, dv);
          ++b;
          continue;
        }
        // The following queries over the same positions (the other heads
        // of this row's GQA group) share each value row in one call.
        float* outs[kMaxSharedQueries];
        const float* weights[kMaxSharedQueries];
        size_t n_y = 0;
        for (; b < n_queries && n_y < kMaxSharedQueries; ++b, ++n_y) {
          if (std::max(c, queries[b].first) != from || std::min(c_end, queries[b].last + 1) != to) break;
          outs[n_y] = queries[b].out;
          weights[n_y] = scratch + b * span + (from - lowest);
        }
        ops.axpy_rows_f32(outs, weights, n_y, converted + (from - c) * dv, dv, to - from, dv);
      }
    }
    p = end;
  }
}

}  // namespace muser::cpu
