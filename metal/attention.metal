// Scaled dot-product attention of float32 queries over an f16 KV plane pair,
// one threadgroup per (query head, query row). Row r attends to positions
// ranges[r].x ..= ranges[r].y (the host folds causality and the sliding
// window into the range); plane row of position p is p % ring_rows for a
// ring, else p. Query head h reads KV head h / (n_head / n_head_kv).
//
// Each simdgroup runs an online softmax over positions first + g,
// first + g + simdgroups, ...: lanes hold head dimensions d = lane + 32 i,
// the score is simd_sum of the lanes' partial dot products (optionally
// soft-capped), and (max, sum, weighted V) are rescaled as the max grows.
// The simdgroups then meet in threadgroup memory and are combined in
// simdgroup order. A row's result depends only on its query, its range and
// the KV, never on the other rows of the dispatch.
// Grid: (n_head, n_rows, 1); threadgroup: simdgroups * 32 threads;
// threadgroup memory 0: simdgroups * (2 + head_dim_v) floats.
#include <metal_stdlib>

#include "backend/metal/kernel_args.h"

using namespace metal;

#define MUSER_ATTN_DIMS_PER_LANE (MUSER_METAL_MAX_HEAD_DIM / MUSER_METAL_SIMD_WIDTH)
// A finite "minus infinity": exp(kNoScore - s) underflows to 0 without relying
// on infinities, which fast-math compilation may not honour.
#define MUSER_ATTN_NO_SCORE (-0.5f * FLT_MAX)

kernel void attention_f16(device const float* q [[buffer(0)]], device const half* k_plane [[buffer(1)]],
                          device const half* v_plane [[buffer(2)]], device const uint2* ranges [[buffer(3)]],
                          device float* out [[buffer(4)]], constant AttentionArgs& args [[buffer(5)]],
                          threadgroup float* scratch [[threadgroup(0)]],
                          uint3 group [[threadgroup_position_in_grid]],
                          uint tid [[thread_index_in_threadgroup]],
                          uint3 threads [[threads_per_threadgroup]],
                          uint simdgroup [[simdgroup_index_in_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]]) {
  const uint head = group.x;
  const uint row = group.y;
  const uint kv_head = head / (args.n_head / args.n_head_kv);
  const uint first = ranges[row].x;
  const uint last = ranges[row].y;
  device const float* qh = q + ulong(row) * args.q_stride + ulong(head) * args.head_dim_k;

  float q_lane[MUSER_ATTN_DIMS_PER_LANE];
  float acc[MUSER_ATTN_DIMS_PER_LANE];
  for (uint i = 0; i < MUSER_ATTN_DIMS_PER_LANE; ++i) {
    const uint d = lane + MUSER_METAL_SIMD_WIDTH * i;
    q_lane[i] = d < args.head_dim_k ? qh[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float running_max = MUSER_ATTN_NO_SCORE;
  float running_sum = 0.0f;
  for (uint p = first + simdgroup; p <= last; p += args.simdgroups) {
    const uint plane_row = args.ring_rows != 0 ? p % args.ring_rows : p;
    device const half* k = k_plane + ulong(plane_row) * args.k_row_width + ulong(kv_head) * args.head_dim_k;
    float partial = 0.0f;
    for (uint i = 0; i < MUSER_ATTN_DIMS_PER_LANE; ++i) {
      const uint d = lane + MUSER_METAL_SIMD_WIDTH * i;
      if (d < args.head_dim_k) partial += q_lane[i] * float(k[d]);
    }
    float score = simd_sum(partial) * args.scale;
    if (args.softcap > 0.0f) score = args.softcap * tanh(score / args.softcap);
    const float new_max = max(running_max, score);
    const float correction = exp(running_max - new_max);
    const float weight = exp(score - new_max);
    running_sum = running_sum * correction + weight;
    running_max = new_max;
    device const half* v = v_plane + ulong(plane_row) * args.v_row_width + ulong(kv_head) * args.head_dim_v;
    for (uint i = 0; i < MUSER_ATTN_DIMS_PER_LANE; ++i) {
      const uint d = lane + MUSER_METAL_SIMD_WIDTH * i;
      if (d < args.head_dim_v) acc[i] = acc[i] * correction + weight * float(v[d]);
    }
  }

  // scratch: [simdgroups] maxima, [simdgroups] sums, [simdgroups][head_dim_v] accumulators.
  threadgroup float* maxima = scratch;
  threadgroup float* sums = scratch + args.simdgroups;
  threadgroup float* accs = scratch + 2 * args.simdgroups;
  if (lane == 0) {
    maxima[simdgroup] = running_max;
    sums[simdgroup] = running_sum;
  }
  for (uint i = 0; i < MUSER_ATTN_DIMS_PER_LANE; ++i) {
    const uint d = lane + MUSER_METAL_SIMD_WIDTH * i;
    if (d < args.head_dim_v) accs[simdgroup * args.head_dim_v + d] = acc[i];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  float global_max = MUSER_ATTN_NO_SCORE;
  for (uint g = 0; g < args.simdgroups; ++g) global_max = max(global_max, maxima[g]);
  float total = 0.0f;
  for (uint g = 0; g < args.simdgroups; ++g) {
    if (sums[g] > 0.0f) total += sums[g] * exp(maxima[g] - global_max);
  }
  const float inv_total = 1.0f / total;
  device float* oh = out + ulong(row) * args.out_stride + ulong(head) * args.head_dim_v;
  for (uint d = tid; d < args.head_dim_v; d += threads.x) {
    float value = 0.0f;
    for (uint g = 0; g < args.simdgroups; ++g) {
      if (sums[g] > 0.0f) value += accs[g * args.head_dim_v + d] * exp(maxima[g] - global_max);
    }
    oh[d] = value * inv_total;
  }
}
