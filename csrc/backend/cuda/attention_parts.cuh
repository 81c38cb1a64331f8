// The pieces both attention kernel families share (ops_attention.cu's
// scalar kernels and attention_mma.cu's tensor-core one): the split
// partition's constants, the fold of a block's shares into a split's partial
// and the fold of a row's partials in split order, so that each family
// computes them with the same operations wherever it runs them.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/quantize_block.cuh"

namespace muser::cuda::attention_parts {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kSplits = 16;          // blocks per (row, head)
constexpr size_t kTileRows = 64;     // rows per launch (bounds the scratch of a prefill step)

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

// The fold of kWarps online-softmax states (running max m[w], running sum
// l[w]) in share order into one partial: the block max, the factors
// f[w] = exp(m[w] - max) that scale each state's values, and the folded sum.
// The decode kernel folds its warps and the prefill kernel its four shares
// through this one piece, so their partials agree bit for bit (the
// tensor-core kernel folds its shares through it too). m[0] is
// finite (share 0 scored the chunk's first position); a share that scored
// nothing (max -inf) gets factor exp(-inf) = 0.
struct ShareFold {
  float max;
  float f[kWarps];
};

__device__ __forceinline__ ShareFold fold_shares(const float* m) {
  ShareFold fold;
  fold.max = m[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) fold.max = fmaxf(fold.max, m[w]);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) fold.f[w] = expf(m[w] - fold.max);
  return fold;
}

// Writes the partial's (max, folded sum) pair.
__device__ __forceinline__ void store_fold(const ShareFold& fold, const float* l, float* ms) {
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) sum = __fmaf_rn(l[w], fold.f[w], sum);
  ms[0] = fold.max;
  ms[1] = sum;
}

// One value pair of the partial: the states' pairs (pair_of(w)) scaled by
// their factors, in share order.
template <typename PairOf>
__device__ __forceinline__ float2 fold_pair(const ShareFold& fold, PairOf pair_of) {
  float2 a = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const float2 v = pair_of(w);
    a.x = __fmaf_rn(v.x, fold.f[w], a.x);
    a.y = __fmaf_rn(v.y, fold.f[w], a.y);
  }
  return a;
}

// Whether this block is the last of the n_active blocks counted at
// `counter` to finish (every thread gets the answer); the last one leaves
// the counter at zero for the next launch (graph replays reuse the
// scratch). The first fence makes this block's partials visible before its
// count; the last block's fence orders its reads of the others' partials
// after their counts. Every thread of the block calls it.
__device__ __forceinline__ bool last_block_in(unsigned* counter, int n_active) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == static_cast<unsigned>(n_active - 1);
  __syncthreads();
  if (!last) return false;
  __threadfence();
  if (threadIdx.x == 0) *counter = 0u;
  return true;
}

// Folds the n_active partials from `base` in split order and divides by the
// folded sum, into out[0, head_dim_v), element 0 being element `first` of
// the attention output (for the quantized copy's block numbers). The
// partials were written by other blocks of this launch: read through L2
// (__ldcg), never a stale L1 line.
// Threads tid of n_threads (a multiple of 32, whole warps) share the
// elements; each element's operations are the same for any thread count.
// A thread's elements go kBatch at a time, each batch's partials (and the
// maxima and sums with the first) loaded before any arithmetic: one L2
// round trip a batch instead of one per split maximum, one for the sums and
// one per element (the tensor-core kernel passes head_dim_v / 32, so its
// warps wait once per (row, head); the combine was ~25% of the prefill
// attention's stall samples in session 18's Nsight source counters).
template <int kBatch>
__device__ inline void combine_partials(int n_active, int head_dim_v, size_t base, const float* part_ms,
                                        const float* part_acc, float* out, size_t first, const QuantizedOut& qo,
                                        int tid, int n_threads) {
  float m[kSplits], l[kSplits];
#pragma unroll
  for (int z = 0; z < kSplits; ++z) {
    m[z] = z < n_active ? __ldcg(part_ms + 2 * (base + z)) : 0.0f;
    l[z] = z < n_active ? __ldcg(part_ms + 2 * (base + z) + 1) : 0.0f;
  }
  float f[kSplits];
  float sum = 0.0f;
  for (int d0 = tid; d0 < head_dim_v; d0 += kBatch * n_threads) {
    float acc[kBatch][kSplits];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int d = d0 + b * n_threads;
#pragma unroll
      for (int z = 0; z < kSplits; ++z) {
        acc[b][z] = z < n_active && d < head_dim_v ? __ldcg(part_acc + (base + z) * head_dim_v + d) : 0.0f;
      }
    }
    if (d0 == tid) {
      float row_max = -INFINITY;
#pragma unroll
      for (int z = 0; z < kSplits; ++z) {
        if (z < n_active) row_max = fmaxf(row_max, m[z]);
      }
#pragma unroll
      for (int z = 0; z < kSplits; ++z) {
        f[z] = 0.0f;
        if (z < n_active) {
          f[z] = expf(m[z] - row_max);
          sum = __fmaf_rn(l[z], f[z], sum);
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int d = d0 + b * n_threads;
      if (d >= head_dim_v) break;  // whole warps: head_dim_v and n_threads are multiples of 32
      float a = 0.0f;
#pragma unroll
      for (int z = 0; z < kSplits; ++z) {
        if (z < n_active) a = __fmaf_rn(acc[b][z], f[z], a);
      }
      const float value = __fdiv_rn(a, sum);
      out[d] = value;
      // A warp's 32 elements are one quantization block: head_dim_v % 32 == 0
      // and n_threads % 32 == 0 keep every warp of an iteration whole.
      if (qo.q != nullptr) {
        const size_t block = (first + d) / 32;
        if (qo.with_sum) {
          quantize_block32<true>(value, tid % 32, block, qo.q, qo.d, qo.s);
        } else {
          quantize_block32<false>(value, tid % 32, block, qo.q, qo.d, qo.s);
        }
      }
    }
  }
}

// The splits a launch over rows [row0, row0 + rows) needs: kSplits unless
// the positions are known on the host, then those some row's chunks reach
// (a row at position p has at most ceil((p + 1) / chunk) chunks, fewer past
// a window). Blocks of other splits would exit at once; launching them
// only costs block slots. Split z's work does not depend on the grid.
inline unsigned splits_used(const KvRows& kv, size_t row0, size_t rows, int chunk) {
  if (kv.host_positions == nullptr) return kSplits;
  return attention_splits(kv.host_positions + row0, rows, chunk);
}

}  // namespace muser::cuda::attention_parts
