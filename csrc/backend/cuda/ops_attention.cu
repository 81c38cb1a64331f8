// Attention of each (row, query head) over the row's visible positions in
// the session's f16 KV planes, split across blocks (flash-decoding):
//
// - The row's visible positions [first, pos] are cut into chunks of
//   kWarps * G positions counted from `first` (G depends on the head size
//   only). Block z of kSplits takes chunks z, z + kSplits, ...; inside a
//   chunk, warp w takes the G positions from w * G. Each warp keeps its own
//   online softmax (running max, sum and weighted values in registers; a
//   lane owns the head's dimension pairs lane, lane + 32, ...), updated once
//   per group of G positions whose K and V rows it loads together.
// - The block folds its warps' states in warp order into one partial (max,
//   sum, values) in the scratch buffer. The last of a (row, head)'s active
//   blocks to finish (a counter per (row, head) in the scratch says which)
//   then folds the row's partials in split order and divides. That used to
//   be a second kernel; folding in the last block saves a launch per layer
//   (~2.7 us on the H200, 3-6% of a decode step), with the same operations
//   in the same order, so the same bits.
//
// Every split point and every fold order depends only on the row's own
// position, the layer's window and the head size, never on the other rows
// of the launch: a row's result is bitwise the same alone, in any group and
// in any prefill chunking. Short contexts leave most splits empty (their
// blocks exit at once), long ones keep kSplits blocks per head busy.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/quantize_block.cuh"
#include "core/error.h"

namespace muser::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kSplits = 16;          // blocks per (row, head)
constexpr size_t kTileRows = 64;     // rows per launch (bounds the scratch of a prefill step)
constexpr int kMaxPairsPerLane = 4;  // head dimensions up to 32 * 2 * 4 = 256

// Positions a warp scores at once for NP dimension pairs per lane: the K and
// V registers of a group stay at 2 * G * NP half2 per lane.
__host__ __device__ constexpr int group_positions(int np) { return np == 1 ? 32 : np == 2 ? 16 : 8; }
__host__ __device__ constexpr int chunk_positions(int np) { return kWarps * group_positions(np); }

__device__ __forceinline__ int first_visible(int pos, int window) {
  return window > 0 && pos + 1 > window ? pos + 1 - window : 0;
}

// Where the last block also writes the output quantized for the matvec
// that reads it (attention_quantized): the view's q, d and s (Q8_1), or
// nothing (q null).
struct QuantizedOut {
  int8_t* q = nullptr;
  float* d = nullptr;
  float* s = nullptr;
  bool with_sum = false;
};

// Folds the n_active partials from `base` in split order and divides by the
// folded sum, into out[0, head_dim_v), element 0 being element `first` of
// the attention output (for the quantized copy's block numbers). The
// partials were written by other blocks of this launch: read through L2
// (__ldcg), never a stale L1 line.
__device__ void combine_partials(int n_active, int head_dim_v, size_t base, const float* part_ms,
                                 const float* part_acc, float* out, size_t first, const QuantizedOut& qo) {
  float row_max = -INFINITY;
  for (int z = 0; z < n_active; ++z) row_max = fmaxf(row_max, __ldcg(part_ms + 2 * (base + z)));
  float f[kSplits];
  float sum = 0.0f;
#pragma unroll
  for (int z = 0; z < kSplits; ++z) {
    f[z] = 0.0f;
    if (z < n_active) {
      f[z] = expf(__ldcg(part_ms + 2 * (base + z)) - row_max);
      sum = __fmaf_rn(__ldcg(part_ms + 2 * (base + z) + 1), f[z], sum);
    }
  }
  for (int d = threadIdx.x; d < head_dim_v; d += kThreads) {
    float a = 0.0f;
#pragma unroll
    for (int z = 0; z < kSplits; ++z) {
      if (z < n_active) a = __fmaf_rn(__ldcg(part_acc + (base + z) * head_dim_v + d), f[z], a);
    }
    const float value = __fdiv_rn(a, sum);
    out[d] = value;
    // A warp's 32 elements are one quantization block: head_dim_v % 32 == 0
    // and kThreads % 32 == 0 keep every warp of an iteration whole.
    if (qo.q != nullptr) {
      const size_t block = (first + d) / 32;
      if (qo.with_sum) {
        quantize_block32<true>(value, threadIdx.x % 32, block, qo.q, qo.d, qo.s);
      } else {
        quantize_block32<false>(value, threadIdx.x % 32, block, qo.q, qo.d, qo.s);
      }
    }
  }
}

// Grid (kSplits, n_head, rows of the tile); NP: dimension pairs per lane.
template <int NP>
__global__ void __launch_bounds__(kThreads)
    attention_partial_kernel(KvRows kv, uint32_t n_layer, uint32_t layer, bool ring, int n_head, int group,
                             int head_dim_k, int head_dim_v, int window, float scale, const float* __restrict__ q,
                             size_t row0, float* __restrict__ part_ms, float* __restrict__ part_acc,
                             unsigned* __restrict__ done, float* __restrict__ out, QuantizedOut qo) {
  dependent_launch_begin();
  constexpr int G = group_positions(NP);
  constexpr int kChunk = chunk_positions(NP);
  const int z = blockIdx.x, h = blockIdx.y;
  const size_t local = blockIdx.z, r = row0 + local;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int pos = kv.positions[r];
  const int first = first_visible(pos, window);
  const int n_chunks = (pos + 1 - first + kChunk - 1) / kChunk;
  if (z >= n_chunks) return;  // the whole block, before any barrier

  const int kvh = h / group;
  const int pairs_k = head_dim_k / 2, pairs_v = head_dim_v / 2;
  const size_t k_stride = static_cast<size_t>(n_head / group) * pairs_k;  // half2 per plane row
  const size_t v_stride = static_cast<size_t>(n_head / group) * pairs_v;
  const int ring_rows = ring ? kv.ring_rows[r] : 0;
  const __half2* kplane = reinterpret_cast<const __half2*>(kv.tables[r][layer]) + static_cast<size_t>(kvh) * pairs_k;
  const __half2* vplane =
      reinterpret_cast<const __half2*>(kv.tables[r][n_layer + layer]) + static_cast<size_t>(kvh) * pairs_v;

  const float2* qr = reinterpret_cast<const float2*>(q + (r * n_head + h) * head_dim_k);
  float2 qv[NP];
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int d2 = lane + 32 * j;
    qv[j] = d2 < pairs_k ? qr[d2] : make_float2(0.0f, 0.0f);
  }

  float m = -INFINITY;  // running max of this warp's scores
  float l = 0.0f;       // running sum of exp(score - m)
  float2 acc[NP];
#pragma unroll
  for (int j = 0; j < NP; ++j) acc[j] = make_float2(0.0f, 0.0f);

  for (int c = z; c < n_chunks; c += kSplits) {
    const int g0 = first + c * kChunk + warp * G;  // this warp's first position of the chunk
    const int count = min(G, pos + 1 - g0);         // warp-uniform
    if (count <= 0) continue;                       // the chunk ends before this warp's share
    __half2 kr[G][NP], vr[G][NP];
    const __half2 zero = __float2half2_rn(0.0f);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int p = g0 + g;
      const size_t slot = ring ? static_cast<size_t>(p % ring_rows) : static_cast<size_t>(p);
      const __half2* krow = kplane + slot * k_stride;
      const __half2* vrow = vplane + slot * v_stride;
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        const int d2 = lane + 32 * j;
        kr[g][j] = g < count && d2 < pairs_k ? krow[d2] : zero;
        vr[g][j] = g < count && d2 < pairs_v ? vrow[d2] : zero;
      }
    }
    // Scores: the lane's pairs in order, then the fixed butterfly.
    float s[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float part = 0.0f;
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        if (lane + 32 * j < pairs_k) {
          const float2 kf = __half22float2(kr[g][j]);
          part = __fmaf_rn(qv[j].x, kf.x, part);
          part = __fmaf_rn(qv[j].y, kf.y, part);
        }
      }
      part = warp_sum(part);
      s[g] = g < count ? __fmul_rn(part, scale) : -INFINITY;
    }
    float group_max = s[0];
#pragma unroll
    for (int g = 1; g < G; ++g) group_max = fmaxf(group_max, s[g]);
    const float m_new = fmaxf(m, group_max);  // finite: position g0 is visible
    const float correction = expf(m - m_new);  // 0 on the warp's first group (m = -inf)
    float group_sum = 0.0f;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      s[g] = g < count ? expf(s[g] - m_new) : 0.0f;
      group_sum = __fadd_rn(group_sum, s[g]);
    }
    l = __fmaf_rn(l, correction, group_sum);
    m = m_new;
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      acc[j].x = __fmul_rn(acc[j].x, correction);
      acc[j].y = __fmul_rn(acc[j].y, correction);
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (g < count) {
#pragma unroll
        for (int j = 0; j < NP; ++j) {
          const float2 vf = __half22float2(vr[g][j]);
          acc[j].x = __fmaf_rn(s[g], vf.x, acc[j].x);
          acc[j].y = __fmaf_rn(s[g], vf.y, acc[j].y);
        }
      }
    }
  }

  // Fold the warps in warp order. Warp 0 scored at least position
  // first + z * kChunk, so the block max is finite; a warp that scored
  // nothing (max -inf) gets factor exp(-inf) = 0.
  __shared__ float m_s[kWarps], l_s[kWarps];
  __shared__ float2 acc_s[kWarps][32 * NP];
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < NP; ++j) acc_s[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  float block_max = m_s[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) block_max = fmaxf(block_max, m_s[w]);
  float f[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) f[w] = expf(m_s[w] - block_max);
  const size_t partial = (local * n_head + h) * kSplits + z;
  if (threadIdx.x == 0) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum = __fmaf_rn(l_s[w], f[w], sum);
    part_ms[2 * partial] = block_max;
    part_ms[2 * partial + 1] = sum;
  }
  float2* pa = reinterpret_cast<float2*>(part_acc + partial * head_dim_v);
  for (int d2 = threadIdx.x; d2 < pairs_v; d2 += kThreads) {
    float2 a = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      a.x = __fmaf_rn(acc_s[w][d2].x, f[w], a.x);
      a.y = __fmaf_rn(acc_s[w][d2].y, f[w], a.y);
    }
    pa[d2] = a;
  }

  // Last block of the (row, head) in: fold the partials. The fence makes
  // this block's partial visible before its count; the last block's fence
  // orders its reads of the others' partials after their counts.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  const int n_active = min(kSplits, n_chunks);
  unsigned* counter = done + local * n_head + h;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == static_cast<unsigned>(n_active - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) *counter = 0u;  // ready for the next launch (graph replays reuse the scratch)
  const size_t first_elem = (r * n_head + h) * head_dim_v;
  combine_partials(n_active, head_dim_v, (local * n_head + h) * kSplits, part_ms, part_acc, out + first_elem,
                   first_elem, qo);
}

int pairs_per_lane(const AttentionShape& shape) {
  const size_t widest = std::max(shape.head_dim_k, shape.head_dim_v);
  return static_cast<int>((widest + 63) / 64);
}

}  // namespace

// The scratch: the counters, one per (row of a tile, head), then the
// partials. The counters' region has one size for every call: launches of
// any row count and head count share a scratch, and a region that moved with
// them would let one launch's partials overwrite counters another left at
// zero (a 5-row prefill after a 37-row one did, on the first GPU run).
constexpr size_t kMaxHeads = 256;
constexpr size_t kCounterBytes = kTileRows * kMaxHeads * sizeof(unsigned);

size_t attention_scratch_bytes(const AttentionShape& shape, size_t n_rows) {
  const size_t rows = std::min(n_rows, kTileRows);
  return kCounterBytes + rows * shape.n_head * kSplits * (2 + shape.head_dim_v) * sizeof(float);
}

void clear_attention_scratch(void* scratch, size_t bytes, void* stream) {
  check_cuda(cudaMemsetAsync(scratch, 0, bytes, static_cast<cudaStream_t>(stream)), "clear attention scratch");
}

namespace {

void run_attention(const KvRows& kv, const AttentionShape& shape, const float* q, size_t n_rows, float* out,
                   void* scratch, const QuantizedOut& qo, void* stream) {
  if (n_rows == 0) return;
  if (shape.head_dim_k > 64 * kMaxPairsPerLane || shape.head_dim_v > 64 * kMaxPairsPerLane ||
      shape.head_dim_k % 2 != 0 || shape.head_dim_v % 2 != 0 || shape.head_dim_k == 0 || shape.head_dim_v == 0) {
    throw ModelFormatError("[cuda attention] head dimensions " + std::to_string(shape.head_dim_k) + "/" +
                           std::to_string(shape.head_dim_v) + ": expected even and at most " +
                           std::to_string(64 * kMaxPairsPerLane));
  }
  if (shape.n_head > kMaxHeads) {
    throw ModelFormatError("[cuda attention] " + std::to_string(shape.n_head) + " query heads: at most " +
                           std::to_string(kMaxHeads));
  }
  if (shape.n_head_kv == 0 || shape.n_head % shape.n_head_kv != 0) {
    throw ModelFormatError("[cuda attention] " + std::to_string(shape.n_head) + " query heads over " +
                           std::to_string(shape.n_head_kv) + " KV heads");
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const size_t tile = std::min(n_rows, kTileRows);
  unsigned* done = static_cast<unsigned*>(scratch);
  float* part_ms = reinterpret_cast<float*>(static_cast<char*>(scratch) + kCounterBytes);
  float* part_acc = part_ms + tile * shape.n_head * kSplits * 2;
  const int np = pairs_per_lane(shape);
  const int n_head = static_cast<int>(shape.n_head);
  const int group = static_cast<int>(shape.n_head / shape.n_head_kv);
  const int hd_k = static_cast<int>(shape.head_dim_k), hd_v = static_cast<int>(shape.head_dim_v);
  const int window = static_cast<int>(shape.window);
  for (size_t row0 = 0; row0 < n_rows; row0 += kTileRows) {
    const unsigned rows = static_cast<unsigned>(std::min(kTileRows, n_rows - row0));
    const dim3 grid(kSplits, static_cast<unsigned>(n_head), rows);
    switch (np) {
      case 1:
        launch_dependent(attention_partial_kernel<1>, grid, kThreads, 0, s, kv, shape.n_layer, shape.layer,
            shape.ring, n_head,
                                                              group, hd_k, hd_v, window, shape.scale, q, row0,
                                                              part_ms, part_acc, done, out, qo);
        break;
      case 2:
        launch_dependent(attention_partial_kernel<2>, grid, kThreads, 0, s, kv, shape.n_layer, shape.layer,
            shape.ring, n_head,
                                                              group, hd_k, hd_v, window, shape.scale, q, row0,
                                                              part_ms, part_acc, done, out, qo);
        break;
      case 3:
        launch_dependent(attention_partial_kernel<3>, grid, kThreads, 0, s, kv, shape.n_layer, shape.layer,
            shape.ring, n_head,
                                                              group, hd_k, hd_v, window, shape.scale, q, row0,
                                                              part_ms, part_acc, done, out, qo);
        break;
      default:
        launch_dependent(attention_partial_kernel<4>, grid, kThreads, 0, s, kv, shape.n_layer, shape.layer,
            shape.ring, n_head,
                                                              group, hd_k, hd_v, window, shape.scale, q, row0,
                                                              part_ms, part_acc, done, out, qo);
        break;
    }
    check_launch("attention");
  }
}

}  // namespace

void attention(const KvRows& kv, const AttentionShape& shape, const float* q, size_t n_rows, float* out,
               void* scratch, void* stream) {
  run_attention(kv, shape, q, n_rows, out, scratch, QuantizedOut{}, stream);
}

ActivationView attention_quantized(const KvRows& kv, const AttentionShape& shape, const float* q, size_t n_rows,
                                   float* out, void* scratch, ActivationFormat format, void* q_scratch,
                                   void* stream) {
  const bool q8_32 = format == ActivationFormat::Q8_0 || format == ActivationFormat::Q8_1;
  if (!q8_32 || shape.head_dim_v % 32 != 0) {
    throw InternalError("[cuda attention_quantized] quantizes to Q8_0 or Q8_1 only, heads of a multiple of 32");
  }
  const ActivationView view = activation_view(format, n_rows, shape.n_head * shape.head_dim_v, q_scratch);
  QuantizedOut qo;
  qo.q = const_cast<int8_t*>(view.q);  // written here; const for the matvec
  qo.d = const_cast<float*>(view.d);
  qo.s = const_cast<float*>(view.s);
  qo.with_sum = format == ActivationFormat::Q8_1;
  run_attention(kv, shape, q, n_rows, out, scratch, qo, stream);
  return view;
}

}  // namespace muser::cuda
