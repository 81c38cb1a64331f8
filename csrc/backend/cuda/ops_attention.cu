// Attention of each (row, query head) over the row's visible positions in
// the session's f16 KV planes: one block per (head, row), walking positions
// in tiles of kTile with an online softmax (running max and sum, rescaled
// per tile). Tiles start at the row's first visible position, so the order
// of every sum depends only on the row's own position and window: the
// result is bitwise independent of the other rows of the launch.
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace muser::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 128;         // positions per tile
constexpr int kMaxHeadDim = 256;   // largest head_dim_k / head_dim_v handled

__global__ void __launch_bounds__(kThreads)
    attention_kernel(KvRows kv, uint32_t n_layer, uint32_t layer, bool ring, int n_head, int group,
                     int head_dim_k, int head_dim_v, int window, float scale, const float* __restrict__ q,
                     float* __restrict__ out) {
  const int h = blockIdx.x;
  const size_t r = blockIdx.y;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int kvh = h / group;
  const size_t k_width = static_cast<size_t>(n_head / group) * head_dim_k;
  const size_t v_width = static_cast<size_t>(n_head / group) * head_dim_v;
  const int32_t pos = kv.positions[r];
  const int first = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
  const int ring_rows = ring ? kv.ring_rows[r] : 0;
  const __half* kplane = reinterpret_cast<const __half*>(kv.tables[r][layer]) + kvh * head_dim_k;
  const __half* vplane = reinterpret_cast<const __half*>(kv.tables[r][n_layer + layer]) + kvh * head_dim_v;

  __shared__ float q_s[kMaxHeadDim];
  __shared__ float p_s[kTile];
  __shared__ float red_s[kThreads / 32];
  const float* qr = q + (r * n_head + h) * head_dim_k;
  for (int i = t; i < head_dim_k; i += kThreads) q_s[i] = qr[i];
  __syncthreads();

  float running_max = -INFINITY;
  float running_sum = 0.0f;
  float acc[kMaxHeadDim / kThreads] = {0.0f, 0.0f};
  for (int tile = first; tile <= pos; tile += kTile) {
    const int tile_end = min(pos + 1, tile + kTile);  // exclusive
    // Scores: each warp takes every fourth position of the tile; lanes split
    // the head's dimensions in pairs.
    for (int j = warp; j < kTile; j += kThreads / 32) {
      const int p = tile + j;
      float s = -INFINITY;
      if (p < tile_end) {
        const size_t slot = ring ? static_cast<size_t>(p % ring_rows) : static_cast<size_t>(p);
        const __half2* krow = reinterpret_cast<const __half2*>(kplane + slot * k_width);
        float partial = 0.0f;
        for (int d2 = lane; d2 < head_dim_k / 2; d2 += 32) {
          const float2 kf = __half22float2(krow[d2]);
          partial = __fmaf_rn(q_s[2 * d2], kf.x, partial);
          partial = __fmaf_rn(q_s[2 * d2 + 1], kf.y, partial);
        }
        s = warp_sum(partial) * scale;
      }
      if (lane == 0) p_s[j] = s;
    }
    __syncthreads();
    // Tile maximum (exact in any order), then the weights and their sum.
    float m = -INFINITY;
    for (int j = t; j < kTile; j += kThreads) m = fmaxf(m, p_s[j]);
    m = warp_max(m);
    if (lane == 0) red_s[warp] = m;
    __syncthreads();
    float tile_max = red_s[0];
    for (int i = 1; i < kThreads / 32; ++i) tile_max = fmaxf(tile_max, red_s[i]);
    const float new_max = fmaxf(running_max, tile_max);
    const float correction = expf(running_max - new_max);
    __syncthreads();
    float e = 0.0f;
    for (int j = t; j < kTile; j += kThreads) {
      const float w = tile + j < tile_end ? expf(p_s[j] - new_max) : 0.0f;
      p_s[j] = w;
      e += w;
    }
    e = warp_sum(e);
    if (lane == 0) red_s[warp] = e;
    __syncthreads();
    float tile_sum = 0.0f;
    for (int i = 0; i < kThreads / 32; ++i) tile_sum += red_s[i];
    running_sum = running_sum * correction + tile_sum;
    running_max = new_max;
    // Weighted values: thread t owns dimensions t and t + kThreads.
#pragma unroll
    for (int c = 0; c < kMaxHeadDim / kThreads; ++c) {
      const int d = t + c * kThreads;
      if (d >= head_dim_v) break;
      float a = acc[c] * correction;
      for (int p = tile; p < tile_end; ++p) {
        const size_t slot = ring ? static_cast<size_t>(p % ring_rows) : static_cast<size_t>(p);
        a = __fmaf_rn(p_s[p - tile], __half2float(vplane[slot * v_width + d]), a);
      }
      acc[c] = a;
    }
    __syncthreads();
  }
  float* o = out + (r * n_head + h) * head_dim_v;
#pragma unroll
  for (int c = 0; c < kMaxHeadDim / kThreads; ++c) {
    const int d = t + c * kThreads;
    if (d < head_dim_v) o[d] = acc[c] / running_sum;
  }
}

}  // namespace

void attention(const KvRows& kv, const AttentionShape& shape, const float* q, size_t n_rows, float* out,
               void* stream) {
  if (n_rows == 0) return;
  if (shape.head_dim_k > kMaxHeadDim || shape.head_dim_v > kMaxHeadDim || shape.head_dim_k % 2 != 0) {
    throw ModelFormatError("[cuda attention] head dimensions " + std::to_string(shape.head_dim_k) + "/" +
                           std::to_string(shape.head_dim_v) + ": expected even and at most " +
                           std::to_string(kMaxHeadDim));
  }
  const dim3 grid(static_cast<unsigned>(shape.n_head), static_cast<unsigned>(n_rows));
  attention_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      kv, shape.n_layer, shape.layer, shape.ring, static_cast<int>(shape.n_head),
      static_cast<int>(shape.n_head / shape.n_head_kv), static_cast<int>(shape.head_dim_k),
      static_cast<int>(shape.head_dim_v), static_cast<int>(shape.window), shape.scale, q, out);
  check_launch("attention");
}

}  // namespace muser::cuda
