// Scaled dot-product attention over the f16 KV cache, for a block of query
// heads that read the same KV head (several rows of one segment, and the
// query heads of one GQA group). Keys and values are converted from f16 in
// registers as they are read (F16VecOps::dot_rows / axpy_rows), a run of
// adjacent cache rows per call; a block of many queries (prefill) converts
// each chunk of rows once into scratch and reads the floats (the *_f32
// entries, the same bits).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/vec_f16.h"
#include "backend/cpu/cpu_kv_storage.h"

namespace muser::cpu {

struct AttentionKv {
  size_t k_offset = 0;  // offset of the KV head within a K row (kv_head * head_dim_k)
  size_t v_offset = 0;  // offset of the KV head within a V row (kv_head * head_dim_v)
  size_t head_dim_k = 0;
  size_t head_dim_v = 0;
  float scale = 1.0f;   // multiplies q.k
};

// One query head: it attends to positions [first, last] (all intact in the cache).
struct AttentionQuery {
  const float* q = nullptr;  // head_dim_k floats
  float* out = nullptr;      // head_dim_v floats
  size_t first = 0;
  size_t last = 0;
};

// Floats of scratch attend_block needs.
size_t attention_scratch_floats(size_t n_queries, size_t span, size_t head_dim_k, size_t head_dim_v);

// For each query: out = sum_p softmax_p(scale * q . K[p]) * V[p] over its
// positions. Every query's arithmetic is the same whichever block it is in:
// its dot products and its weighted sum visit positions in ascending order,
// so the result depends only on q and the cache (batch invariance).
// scratch: attention_scratch_floats(n_queries, span, ...) floats, where span
// covers every query's range (max last - min first + 1).
void attend_block(const KvPlanes& kv, const AttentionKv& head, const AttentionQuery* queries, size_t n_queries,
                  const F16VecOps& ops, float* scratch);

}  // namespace muser::cpu
