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
//
// Heads of 64 and 128 dimensions with up to 16 query heads per KV head
// (llama3-8b, smollm2, ...) run on the tensor cores instead
// (attention_mma.cu: the same partition and folds, f16 MMAs for the scores
// and the weighted values, one kernel for decode and prefill); every other
// shape runs the scalar kernels of this file.
//
// Two kernels compute exactly that: attention_partial_kernel (the decode
// kernel, one block per (row, query head, split)) and, from 5 rows on,
// attention_shared_kernel (the prefill kernel, further down: a block per
// (KV head, a few rows) that walks all their splits, staging each K/V
// position once in shared memory for its rows and the KV head's query
// heads, and folds its partials itself). Their float
// operations per row are the same, so decode and prefill agree bit for bit
// (tests/cuda/test_cuda_prefill_attention.py).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

#include "backend/cuda/attention_mma.h"
#include "backend/cuda/attention_parts.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/quantize_block.cuh"
#include "core/env_switch.h"
#include "core/error.h"
#include "core/limits.h"

namespace muser::cuda {
namespace {

using namespace attention_parts;

constexpr int kMaxPairsPerLane = 4;  // head dimensions up to 32 * 2 * 4 = 256

// Positions a warp scores at once for NP dimension pairs per lane: the K and
// V registers of a group stay at 2 * G * NP half2 per lane.
__host__ __device__ constexpr int group_positions(int np) { return np == 1 ? 32 : np == 2 ? 16 : 8; }
__host__ __device__ constexpr int chunk_positions(int np) { return kWarps * group_positions(np); }

// One exchange step of the transposed butterfly: lanes kOffset apart swap
// the half of their N values that the other keeps (compile-time indices
// throughout, so the values stay in registers).
template <int N, int kOffset>
__device__ __forceinline__ void exchange_half(float (&v)[16], bool upper) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const float send = upper ? v[i] : v[i + N / 2];
    const float keep = upper ? v[i + N / 2] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kOffset);
  }
}

// The rest of warp_sum's butterfly for G positions at once, after its first
// step (offset 16) left G / 2 values in v: each further exchange halves the
// values a lane holds (it keeps the positions whose next bit is its own lane
// bit `offset`), then warp_sum's last steps run as they are. Returns the
// sum of position lane >> (5 - log2(G)), every add pairing the same two
// values as warp_sum's.
template <int G>
__device__ __forceinline__ float transposed_warp_sums(float (&v)[16], int lane) {
  static_assert(G == 32 || G == 16 || G == 8, "group sizes of group_positions");
  if constexpr (G == 32) {
    exchange_half<16, 8>(v, (lane & 8) != 0);
    exchange_half<8, 4>(v, (lane & 4) != 0);
    exchange_half<4, 2>(v, (lane & 2) != 0);
    exchange_half<2, 1>(v, (lane & 1) != 0);
    return v[0];
  } else if constexpr (G == 16) {
    exchange_half<8, 8>(v, (lane & 8) != 0);
    exchange_half<4, 4>(v, (lane & 4) != 0);
    exchange_half<2, 2>(v, (lane & 2) != 0);
    float s = v[0];
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    return s;
  } else {
    exchange_half<4, 8>(v, (lane & 8) != 0);
    exchange_half<2, 4>(v, (lane & 4) != 0);
    float s = v[0];
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    return s;
  }
}

// One group update of a warp's online softmax for HG query heads of one KV
// head at once, the body both kernels run per group of G positions: `count`
// (1..G) positions whose K and V pairs come from k_at / v_at (g, j, d2,
// pairs): position g's pair d2 = lane + 32 j of a row of `pairs` pairs, in
// registers (the decode kernel, HG = 1) or in shared memory (the prefill
// kernel, HG up to 4: each K/V pair read once serves the HG heads). kFull:
// pairs_k = pairs_v = 32 * NP (heads of 64, 128, 192, 256: every lane holds
// NP pairs, constant strides); kWhole: count = G (every group but a row's
// last). Both only drop checks that would pass and fold constants: the same
// operations.
//
// Per head, the operations are the same whatever HG (the heads only share
// the loads): the scores, each lane's partial over its dimension pairs in
// order, summed over the lanes in warp_sum's xor-butterfly tree, run
// "transposed" (transposed_warp_sums): each exchange step halves the
// positions a lane holds, so G scores cost about G shuffles instead of 5 G,
// and every add pairs the same two values as warp_sum does. Then the group
// max (exact in any order), the correction, one expf per score on the lane
// holding it, group_sum in position order, and the l and acc updates in
// position order.
template <int NP, int HG, bool kFull, bool kWhole, typename KAt, typename VAt>
__device__ __forceinline__ void update_group(KAt k_at, VAt v_at, int pairs_k_arg, int pairs_v_arg, int count_arg,
                                             const float2 (&qv)[HG][NP], float scale, int lane, float (&m)[HG],
                                             float (&l)[HG], float2 (&acc)[HG][NP]) {
  constexpr int G = group_positions(NP);
  const int pairs_k = kFull ? 32 * NP : pairs_k_arg, pairs_v = kFull ? 32 * NP : pairs_v_arg;
  const int count = kWhole ? G : count_arg;
  constexpr int kShift = G == 32 ? 0 : G == 16 ? 1 : 2;  // lane >> kShift: the position a lane's score is
  // This lane's partials of position g's score, one per head: its dimension pairs in order.
  auto partials = [&](int g, float (&part)[HG]) {
#pragma unroll
    for (int hh = 0; hh < HG; ++hh) part[hh] = 0.0f;
    if (kWhole || g < count) {
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        const int d2 = lane + 32 * j;
        if (kFull || d2 < pairs_k) {
          const float2 kf = k_at(g, j, d2, pairs_k);
#pragma unroll
          for (int hh = 0; hh < HG; ++hh) {
            part[hh] = __fmaf_rn(qv[hh][j].x, kf.x, part[hh]);
            part[hh] = __fmaf_rn(qv[hh][j].y, kf.y, part[hh]);
          }
        }
      }
    }
  };
  // The butterfly's first step (offset 16) as the partials come, so only
  // G / 2 of them per head are live at once.
  float v[HG][16];
  const bool upper = (lane & 16) != 0;
#pragma unroll
  for (int i = 0; i < G / 2; ++i) {
    float lo[HG], hi[HG];
    partials(i, lo);
    partials(i + G / 2, hi);
#pragma unroll
    for (int hh = 0; hh < HG; ++hh) {
      v[hh][i] = (upper ? hi[hh] : lo[hh]) + __shfl_xor_sync(0xffffffffu, upper ? lo[hh] : hi[hh], 16);
    }
  }
  const int mine = lane >> kShift;
  float m_new[HG], correction[HG], e[HG];
#pragma unroll
  for (int hh = 0; hh < HG; ++hh) {
    const float sum = transposed_warp_sums<G>(v[hh], lane);
    const float s = kWhole || mine < count ? __fmul_rn(sum, scale) : -INFINITY;
    // The max over the group's scores (-inf past count), exact in any order.
    const float group_max = warp_max(s);
    m_new[hh] = fmaxf(m[hh], group_max);
    correction[hh] = expf(m[hh] - m_new[hh]);
    e[hh] = kWhole || mine < count ? expf(s - m_new[hh]) : 0.0f;
  }
#pragma unroll
  for (int hh = 0; hh < HG; ++hh) {
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      acc[hh][j].x = __fmul_rn(acc[hh][j].x, correction[hh]);
      acc[hh][j].y = __fmul_rn(acc[hh][j].y, correction[hh]);
    }
  }
  float group_sum[HG];
#pragma unroll
  for (int hh = 0; hh < HG; ++hh) group_sum[hh] = 0.0f;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float eg[HG];
#pragma unroll
    for (int hh = 0; hh < HG; ++hh) {
      eg[hh] = __shfl_sync(0xffffffffu, e[hh], g << kShift);
      group_sum[hh] = __fadd_rn(group_sum[hh], eg[hh]);
    }
    if (kWhole || g < count) {
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        const int d2 = lane + 32 * j;
        if (kFull || d2 < pairs_v) {
          const float2 vf = v_at(g, j, d2, pairs_v);
#pragma unroll
          for (int hh = 0; hh < HG; ++hh) {
            acc[hh][j].x = __fmaf_rn(eg[hh], vf.x, acc[hh][j].x);
            acc[hh][j].y = __fmaf_rn(eg[hh], vf.y, acc[hh][j].y);
          }
        }
      }
    }
  }
#pragma unroll
  for (int hh = 0; hh < HG; ++hh) {
    l[hh] = __fmaf_rn(l[hh], correction[hh], group_sum[hh]);
    m[hh] = m_new[hh];
  }
}

// Grid (kSplits, n_head, rows of the tile); NP: dimension pairs per lane.
template <int NP>
__global__ void __launch_bounds__(kThreads)
    attention_partial_kernel(KvRows kv, uint32_t n_layer, uint32_t layer, bool ring, int n_head, int group,
                             int head_dim_k, int head_dim_v, int window, float scale, const float* __restrict__ q,
                             size_t row0, float* __restrict__ part_ms, float* __restrict__ part_acc,
                             unsigned* __restrict__ done, float* __restrict__ out, QuantizedOut qo, bool prefetch) {
  constexpr int G = group_positions(NP);
  constexpr int kChunk = chunk_positions(NP);
  const int z = blockIdx.x, h = blockIdx.y;
  const size_t local = blockIdx.z, r = row0 + local;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // No kernel writes the positions (the step's inputs, copied in before its
  // first kernel): a split no chunk reaches exits before the wait, while
  // the kernel before is still running, instead of holding a block slot.
  const int pos = kv.positions[r];
  const int first = first_visible(pos, window);
  const int n_chunks = (pos + 1 - first + kChunk - 1) / kChunk;
  if (z >= n_chunks) return;  // the whole block, before any barrier

  // Nor the session tables. So the planes, and the K/V rows of this warp's
  // first group where earlier steps wrote all of them, load before the wait
  // too: this step writes only the positions of its own rows, which for row
  // `local` of a session are pos - local .. pos at the lowest (a prefill
  // chunk's rows are consecutive positions in row order; any other row is
  // another session's). Older positions were written by kernels that are
  // complete once the kernel before this one has passed its own wait.
  const int kvh = h / group;
  const int pairs_k = head_dim_k / 2, pairs_v = head_dim_v / 2;
  const size_t k_stride = static_cast<size_t>(n_head / group) * pairs_k;  // half2 per plane row
  const size_t v_stride = static_cast<size_t>(n_head / group) * pairs_v;
  const int ring_rows = ring ? kv.ring_rows[r] : 0;
  const __half2* kplane = reinterpret_cast<const __half2*>(kv.tables[r][layer]) + static_cast<size_t>(kvh) * pairs_k;
  const __half2* vplane =
      reinterpret_cast<const __half2*>(kv.tables[r][n_layer + layer]) + static_cast<size_t>(kvh) * pairs_v;
  __half2 kr[G][NP], vr[G][NP];
  // The K/V rows of the group of G positions from g0 (count of them) into kr, vr.
  auto load_group = [&](int g0, int count) {
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
  };
  const int first_g0 = first + z * kChunk + warp * G;
  const int first_count = min(G, pos + 1 - first_g0);
  const bool prefetched =
      prefetch && first_count > 0 && first_g0 + first_count <= pos - static_cast<int>(local);
  if (prefetched) load_group(first_g0, first_count);
  dependent_launch_begin();

  const float2* qr = reinterpret_cast<const float2*>(q + (r * n_head + h) * head_dim_k);
  float2 qv[1][NP];
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int d2 = lane + 32 * j;
    qv[0][j] = d2 < pairs_k ? qr[d2] : make_float2(0.0f, 0.0f);
  }

  float m[1] = {-INFINITY};  // running max of this warp's scores
  float l[1] = {0.0f};       // running sum of exp(score - m)
  float2 acc[1][NP];
#pragma unroll
  for (int j = 0; j < NP; ++j) acc[0][j] = make_float2(0.0f, 0.0f);

  for (int c = z; c < n_chunks; c += kSplits) {
    const int g0 = first + c * kChunk + warp * G;  // this warp's first position of the chunk
    const int count = min(G, pos + 1 - g0);         // warp-uniform
    if (count <= 0) continue;                       // the chunk ends before this warp's share
    if (c != z || !prefetched) load_group(g0, count);
    auto k_at = [&](int g, int j, int, int) { return __half22float2(kr[g][j]); };
    auto v_at = [&](int g, int j, int, int) { return __half22float2(vr[g][j]); };
    if (count == G) {
      update_group<NP, 1, false, true>(k_at, v_at, pairs_k, pairs_v, G, qv, scale, lane, m, l, acc);
    } else {
      update_group<NP, 1, false, false>(k_at, v_at, pairs_k, pairs_v, count, qv, scale, lane, m, l, acc);
    }
  }

  // Fold the warps in warp order (fold_shares).
  __shared__ float m_s[kWarps], l_s[kWarps];
  __shared__ float2 acc_s[kWarps][32 * NP];
  if (lane == 0) {
    m_s[warp] = m[0];
    l_s[warp] = l[0];
  }
#pragma unroll
  for (int j = 0; j < NP; ++j) acc_s[warp][lane + 32 * j] = acc[0][j];
  __syncthreads();
  const ShareFold fold = fold_shares(m_s);
  const size_t partial = (local * n_head + h) * kSplits + z;
  if (threadIdx.x == 0) store_fold(fold, l_s, part_ms + 2 * partial);
  float2* pa = reinterpret_cast<float2*>(part_acc + partial * head_dim_v);
  for (int d2 = threadIdx.x; d2 < pairs_v; d2 += kThreads) {
    pa[d2] = fold_pair(fold, [&](int w) { return acc_s[w][d2]; });
  }

  // Last block of the (row, head) in: fold the partials.
  const int n_active = min(kSplits, n_chunks);
  if (!last_block_in(done + local * n_head + h, n_active)) return;
  const size_t first_elem = (r * n_head + h) * head_dim_v;
  combine_partials<1>(n_active, head_dim_v, (local * n_head + h) * kSplits, part_ms, part_acc, out + first_elem,
                      first_elem, qo, threadIdx.x, kThreads);
}

// ---------------------------------------------------------------------------
// The prefill kernel: the same results, row for row and bit for bit, with
// each K/V position read once per block for many (row, query head) pairs.
//
// In a prefill segment the rows are consecutive positions of one session and
// the query heads of a GQA group read one KV head, so attention_partial_kernel
// reads each K/V row once per (row, head): up to 64 rows x 4 heads times per
// launch for llama3-8b. Here block (KV head, group of block_rows rows)
// walks all of its rows' splits z in turn and, for each, their chunks c =
// z, z + kSplits, ...: it stages in shared memory the union of its rows'
// chunk-c windows (the rows' windows start at their own `first`, which
// differs between rows only on sliding-window layers past the window, by one
// per row there), and each of its warps computes one share of the chunk (the
// G positions the decode kernel's warp w takes) for one row and up to four
// query heads of the KV head, so that each staged K/V pair read from shared
// memory serves all of them. After a split's chunks the block folds the
// shares into the split's partials, and after the last split it folds each
// (row, head)'s partials itself: no counters, no block waiting on others.
//
// What stays exactly the decode kernel's, for every (row, head):
// - the K and V values: staged as the planes' f16 pairs, converted to
//   floats where read (exactly, as the decode kernel converts them in
//   registers);
// - the split/chunk partition and, per chunk, the four warp shares of G
//   positions (warp w of the decode kernel is share w here too);
// - a share's group update: update_group, the decode kernel's own (K/V
//   read from shared memory here, from registers there; per head the same
//   operations whatever the number of heads a warp updates at once);
// - the fold of the four shares in share order (their states pass through
//   shared memory here, as there) and the fold of the splits
//   (combine_partials) in split order, in the same scratch layout (this
//   kernel leaves the decode kernel's counters at zero).
// Rows of a block that read other planes (another session in the launch) or
// whose windows do not fit together are staged in separate rounds, so any
// set of rows is computed correctly; only sharing is lost.
//
// Warps of a block: per row, kWarps shares x n_sub head sets of HG heads
// (n_sub = ceil(group / 4), HG = ceil(group / n_sub) rounded up to 1, 2 or
// 4; a set's heads past the group compute a copy of the group's last head
// and are never folded); block_rows = warps / (kWarps * n_sub) rows, at
// least one.
//
// Session 11's version ran a block per (split, KV head, rows), one chunk
// each in a prefill segment, and gave each warp one (row, head) and its four
// shares in turn. Its blocks spent their time in fixed steps (the rows'
// tables, the staging, the fold, the counter, the last block's fold), which
// fewer shared-memory reads did not shorten: four heads per warp took its
// pp512 attention on an H100 (bench_cuda_attention.py --prefill-only) from
// 426 to 387 us per layer, a block per (KV head, rows) walking all its
// splits to 291 (263 at 16 warps).
constexpr int kSharedMaxWarps = 16;

// Warps per prefill block by default (4 rows of a KV head of up to 4 query
// heads). 16 against 8 on an H100 (2026-12-06, with the cp.async staging):
// llama3-8b attention 241 against 273 us per layer at positions 0..511,
// pp512 9,948 / 9,964 against 9,722 / 9,694 tok/s; smollm2-135m pp512
// 94,297 / 95,018 against 89,518 / 89,131. MUSER_CUDA_PREFILL_WARPS=8 (or
// 4, 12) sets it for A/B runs (the same bits at any count). Once per
// process, like MUSER_CUDA_PDL.
constexpr int kSharedDefaultWarps = 16;
int default_prefill_warps() {
  static const int warps = [] {
    for (const int w : {4, 8, 12, 16}) {
      if (env_is("MUSER_CUDA_PREFILL_WARPS", std::to_string(w).c_str())) return w;
    }
    return kSharedDefaultWarps;
  }();
  return warps;
}

// The prefill kernel's warp layout for `group` query heads per KV head.
struct HeadSets {
  int n_sub;  // head sets per row
  int hg;     // heads per set: 1, 2 or 4
};
__host__ __device__ constexpr HeadSets head_sets(int group) {
  const int n_sub = (group + 3) / 4;
  const int hg = (group + n_sub - 1) / n_sub;
  return {n_sub, hg <= 1 ? 1 : hg <= 2 ? 2 : 4};
}

// A row of the block as its warps need it (plain, for __shared__ storage).
struct SharedRow {
  const __half2* k;  // the row's K plane of the layer, at the block's KV head
  const __half2* v;
  int pos, first, n_chunks, ring_rows;
};

// Grid (n_head_kv, ceil(tile_rows / block_rows)), block_rows * kWarps *
// n_sub warps; dynamic shared memory (prefill_smem_bytes): two staging
// buffers of `capacity` K rows then `capacity` V rows of the KV head, as the
// planes' half2 pairs (capacity = kChunk + block_rows - 1 positions: one
// chunk plus the spread of the rows' window starts), copied with cp.async one
// step ahead of the step that reads them, then the shares' states after a
// split. kFull: heads of 64 * NP dimensions for both K and V (see
// update_group).
template <int NP, int HG, bool kFull>
__global__ void __launch_bounds__(32 * kSharedMaxWarps, 1)
    attention_shared_kernel(KvRows kv, uint32_t n_layer, uint32_t layer, bool ring, int n_head, int group,
                            int head_dim_k_arg, int head_dim_v_arg, int window, float scale,
                            const float* __restrict__ q, size_t row0, int tile_rows, int block_rows, int n_sub,
                            int capacity, float* __restrict__ part_ms, float* __restrict__ part_acc,
                            float* __restrict__ out, QuantizedOut qo) {
  constexpr int G = group_positions(NP);
  constexpr int kChunk = chunk_positions(NP);
  extern __shared__ uint4 staged_raw[];
  __shared__ SharedRow rows_s[kSharedMaxWarps];
  const int kvh = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  // The tile's last row groups first: they take the most chunks.
  const int local0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * block_rows;
  const int n_rows = min(block_rows, tile_rows - local0);
  const int head_dim_k = kFull ? 64 * NP : head_dim_k_arg, head_dim_v = kFull ? 64 * NP : head_dim_v_arg;
  const int pairs_k = head_dim_k / 2, pairs_v = head_dim_v / 2;
  const size_t k_stride = static_cast<size_t>(n_head / group) * pairs_k;  // half2 per plane row
  const size_t v_stride = static_cast<size_t>(n_head / group) * pairs_v;
  if (static_cast<int>(threadIdx.x) < n_rows) {
    const size_t r = row0 + local0 + threadIdx.x;
    SharedRow row;
    row.pos = kv.positions[r];
    row.first = first_visible(row.pos, window);
    row.n_chunks = (row.pos + 1 - row.first + kChunk - 1) / kChunk;
    row.ring_rows = ring ? kv.ring_rows[r] : 0;
    row.k = reinterpret_cast<const __half2*>(kv.tables[r][layer]) + static_cast<size_t>(kvh) * pairs_k;
    row.v = reinterpret_cast<const __half2*>(kv.tables[r][n_layer + layer]) + static_cast<size_t>(kvh) * pairs_v;
    rows_s[threadIdx.x] = row;
  }
  __syncthreads();
  int max_chunks = 0;
  for (int i = 0; i < n_rows; ++i) max_chunks = max(max_chunks, rows_s[i].n_chunks);
  dependent_launch_begin();

  // This warp's row, share and head set; warps past the block's rows only help stage.
  const int per_row = kWarps * n_sub;
  const int ri = warp / per_row, share = warp % per_row % kWarps, set0 = warp % per_row / kWarps * HG;
  const SharedRow me = rows_s[ri < n_rows ? ri : 0];
  const bool has_row = ri < n_rows;
  const size_t r = row0 + local0 + ri;

  float2 qv[HG][NP];
#pragma unroll
  for (int hh = 0; hh < HG; ++hh) {
    const int h = kvh * group + min(set0 + hh, group - 1);
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const int d2 = lane + 32 * j;
      qv[hh][j] = make_float2(0.0f, 0.0f);
      if (has_row && d2 < pairs_k) {
        qv[hh][j] = reinterpret_cast<const float2*>(q + (r * n_head + h) * head_dim_k)[d2];
      }
    }
  }
  // Shared memory: two staging buffers (K rows then V rows of `capacity`
  // positions each, as the planes' half2 pairs), then the shares' states
  // after a split: (m, l) at fold_ml[2 i], the values at fold_acc[i *
  // pairs_v], i = (row * group + head) * kWarps + share.
  const size_t buf_pairs = static_cast<size_t>(capacity) * (pairs_k + pairs_v);
  __half2* staged = reinterpret_cast<__half2*>(staged_raw);
  float* fold_ml = reinterpret_cast<float*>(staged + 2 * buf_pairs);
  float2* fold_acc = reinterpret_cast<float2*>(fold_ml + 2 * block_rows * group * kWarps);
  const int n_splits = min(kSplits, max_chunks);

  // The block's staging steps in order: per split z, its chunks c = z, z +
  // kSplits, ..., per chunk its rounds of rows staged together (from the
  // first row still taking the chunk, the rows that read the same planes and
  // whose chunk-c windows fit together in `capacity` positions; in a prefill
  // segment one round of all). Every thread walks the same steps.
  struct Step {
    int z, c, i0, i1, lo, hi, lead;
  };
  // The round of chunk c from row i0 on, or lead == n_rows if no row from i0 takes the chunk.
  auto round_from = [&](int z, int c, int i0) {
    Step st{z, c, i0, n_rows, 0, 0, i0};
    while (st.lead < n_rows && c >= rows_s[st.lead].n_chunks) ++st.lead;
    if (st.lead == n_rows) return st;
    const SharedRow& L = rows_s[st.lead];
    st.lo = L.first + c * kChunk;
    st.hi = min(L.pos + 1, st.lo + kChunk);
    int i1 = st.lead + 1;
    for (; i1 < n_rows; ++i1) {
      const SharedRow& o = rows_s[i1];
      if (c >= o.n_chunks) continue;
      const int o_lo = o.first + c * kChunk;
      const int o_hi = min(o.pos + 1, o_lo + kChunk);
      const int new_lo = min(st.lo, o_lo), new_hi = max(st.hi, o_hi);
      if (o.k != L.k || o.v != L.v || o.ring_rows != L.ring_rows || new_hi - new_lo > capacity) break;
      st.lo = new_lo;
      st.hi = new_hi;
    }
    st.i1 = i1;
    return st;
  };
  // The step after `st` (z == n_splits: none). A chunk below max_chunks has
  // a row that takes it, so its first round exists.
  auto next_step = [&](const Step& st) {
    Step nx = round_from(st.z, st.c, st.i1);
    if (nx.lead < n_rows) return nx;
    if (st.c + kSplits < max_chunks) return round_from(st.z, st.c + kSplits, 0);
    if (st.z + 1 < n_splits) return round_from(st.z + 1, st.z + 1, 0);
    nx.z = n_splits;
    return nx;
  };
  // Copies positions [lo, hi) of the step's planes into buffer `buf`
  // (cp.async: 16 bytes where rows and planes allow, else 4), then commits
  // the group (empty past the last step, so every wait counts alike).
  auto issue = [&](const Step& st, int buf) {
    if (st.z < n_splits) {
      const SharedRow& L = rows_s[st.lead];
      __half2* ks = staged + buf * buf_pairs;
      __half2* vs = ks + static_cast<size_t>(capacity) * pairs_k;
      const int n_pos = st.hi - st.lo;
      const bool wide = pairs_k % 4 == 0 && pairs_v % 4 == 0 &&
                        ((reinterpret_cast<uintptr_t>(L.k) | reinterpret_cast<uintptr_t>(L.v)) % 16) == 0;
      const int unit = wide ? 4 : 1;  // pairs per copy
      const int per_k = pairs_k / unit, per_pos = per_k + pairs_v / unit;
      for (int i = threadIdx.x; i < n_pos * per_pos; i += blockDim.x) {
        const int pi = i / per_pos, e = i % per_pos;
        const int p = st.lo + pi;
        const size_t slot = ring ? static_cast<size_t>(p % L.ring_rows) : static_cast<size_t>(p);
        const bool is_k = e < per_k;
        const __half2* src = is_k ? L.k + slot * k_stride + e * unit : L.v + slot * v_stride + (e - per_k) * unit;
        __half2* dst = is_k ? ks + pi * pairs_k + e * unit : vs + pi * pairs_v + (e - per_k) * unit;
        if (wide) {
          cp_async16(dst, src, 16);
        } else {
          cp_async4(dst, src, 4);
        }
      }
    }
    cp_async_commit();
  };

  float m[HG], l[HG];
  float2 acc[HG][NP];
  Step cur = round_from(0, 0, 0);
  issue(cur, 0);
  for (int n = 0; cur.z < n_splits; ++n) {
    const int z = cur.z;
    const bool active = has_row && z < me.n_chunks;
    if (cur.c == z && cur.i0 == 0) {  // a split's first step: fresh states
#pragma unroll
      for (int hh = 0; hh < HG; ++hh) {
        m[hh] = -INFINITY;
        l[hh] = 0.0f;
#pragma unroll
        for (int j = 0; j < NP; ++j) acc[hh][j] = make_float2(0.0f, 0.0f);
      }
    }
    // The next step's copies go to the other buffer, whose readers finished
    // before the last barrier; they run while this step computes.
    const Step nx = next_step(cur);
    issue(nx, (n + 1) % 2);
    cp_async_wait<1>();  // this thread's copies of this step
    __syncthreads();     // everyone's
    if (active && ri >= cur.i0 && ri < cur.i1 && cur.c < me.n_chunks) {
      const int g0 = me.first + cur.c * kChunk + share * G;  // the share's first position of the chunk
      const int count = min(G, me.pos + 1 - g0);              // warp-uniform
      const __half2* ks_at = staged + (n % 2) * buf_pairs + static_cast<size_t>(g0 - cur.lo) * pairs_k;
      const __half2* vs_at =
          staged + (n % 2) * buf_pairs + static_cast<size_t>(capacity) * pairs_k + static_cast<size_t>(g0 - cur.lo) * pairs_v;
      // The conversion is exact, as the decode kernel's of the same pairs.
      auto k_at = [&](int g, int, int d2, int pairs) { return __half22float2(ks_at[g * pairs + d2]); };
      auto v_at = [&](int g, int, int d2, int pairs) { return __half22float2(vs_at[g * pairs + d2]); };
      if (count == G) {
        update_group<NP, HG, kFull, true>(k_at, v_at, pairs_k, pairs_v, G, qv, scale, lane, m, l, acc);
      } else if (count > 0) {
        update_group<NP, HG, kFull, false>(k_at, v_at, pairs_k, pairs_v, count, qv, scale, lane, m, l, acc);
      }
    }
    if (nx.z != z) {
      // The split's last step: the shares' states into shared memory, then
      // warp k folds (row k / group, head k % group)'s shares in share order
      // (the decode kernel's warp fold) into the split's partial.
      // n_rows * group <= n_warps: at most one pair a warp.
      if (active) {
#pragma unroll
        for (int hh = 0; hh < HG; ++hh) {
          if (set0 + hh >= group) break;
          const int i = (ri * group + set0 + hh) * kWarps + share;
          if (lane == 0) {
            fold_ml[2 * i] = m[hh];
            fold_ml[2 * i + 1] = l[hh];
          }
#pragma unroll
          for (int j = 0; j < NP; ++j) {
            const int d2 = lane + 32 * j;
            if (d2 < pairs_v) fold_acc[static_cast<size_t>(i) * pairs_v + d2] = acc[hh][j];
          }
        }
      }
      __syncthreads();
      for (int k = warp; k < n_rows * group; k += n_warps) {
        const int fr = k / group, fh = k % group;
        if (z >= rows_s[fr].n_chunks) continue;
        const size_t local = static_cast<size_t>(local0 + fr);
        const int i0 = (fr * group + fh) * kWarps;
        float ms[kWarps], ls[kWarps];
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          ms[w] = fold_ml[2 * (i0 + w)];
          ls[w] = fold_ml[2 * (i0 + w) + 1];
        }
        const ShareFold fold = fold_shares(ms);
        const size_t partial = (local * n_head + kvh * group + fh) * kSplits + z;
        if (lane == 0) store_fold(fold, ls, part_ms + 2 * partial);
        float2* pa = reinterpret_cast<float2*>(part_acc + partial * head_dim_v);
        for (int d2 = lane; d2 < pairs_v; d2 += 32) {
          pa[d2] = fold_pair(fold, [&](int w) { return fold_acc[static_cast<size_t>(i0 + w) * pairs_v + d2]; });
        }
      }
    }
    // This step's buffer (and a split's states) are read before the step
    // after next copies into it; a split's partials are written.
    __syncthreads();
    cur = nx;
  }
  cp_async_wait<0>();

  // Each (row, head)'s partials in split order, by warp k as above (this
  // block wrote them: the barrier above makes them visible).
  for (int k = warp; k < n_rows * group; k += n_warps) {
    const int fr = k / group, h = kvh * group + k % group;
    const size_t local = static_cast<size_t>(local0 + fr), rr = row0 + local;
    const size_t first_elem = (rr * n_head + h) * head_dim_v;
    combine_partials<1>(min(kSplits, rows_s[fr].n_chunks), head_dim_v, (local * n_head + h) * kSplits, part_ms,
                        part_acc, out + first_elem, first_elem, qo, lane, 32);
  }
}

// The prefill kernel's shared memory for a block: two staging buffers and
// the shares' states.
size_t prefill_smem_bytes(const AttentionShape& shape, int capacity, int block_rows, int group) {
  const size_t staging =
      2 * static_cast<size_t>(capacity) * (shape.head_dim_k / 2 + shape.head_dim_v / 2) * sizeof(__half2);
  const size_t fold = static_cast<size_t>(block_rows) * group * kWarps * (2 + shape.head_dim_v) * sizeof(float);
  return staging + fold;
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
// The tensor-core kernel counts per (tile, KV head) at (first row of the
// tile) * n_head + (first head of the KV head): up to a whole step's rows.
constexpr size_t kCounterBytes = std::max(kTileRows, kMaxStepRows) * kMaxHeads * sizeof(unsigned);

namespace {

// Rows per launch of the prefill kernel: a whole step of up to
// kMaxStepRows (512) rows in one launch, its partials in the scratch (512
// rows x 32 heads x 16 splits x 130 floats: 136 MB for llama3-8b). Launches
// of 64 rows (128 blocks of a KV head and 4 rows at 8 KV heads, 96 blocks of
// 128 rows at smollm2-135m's 3) ran one after the other, each under one wave
// on an H100's 132 SMs (the blocks' 128 registers a thread allow one block
// an SM). On an H100 (2026-12-06) one launch took smollm2-135m's pp512 from
// 90,652 to 103,990 tok/s and left llama3-8b's as it was (10,185 / 10,181):
// its 8 launches each filled the GPU, and its attention stays 229 us a
// layer. MUSER_CUDA_PREFILL_TILE_ROWS=64 restores the launches of 64 rows
// (128 at 3 to 7 KV heads, 256 below) for A/B runs: the same bits either way
// (a row's work does not depend on its launch). Never fewer than the decode
// kernel's kTileRows, so the scratch sized for it holds both. Read once.
size_t prefill_tile_rows(const AttentionShape& shape) {
  static const bool small = env_is("MUSER_CUDA_PREFILL_TILE_ROWS", "64");
  if (small) return kTileRows * (shape.n_head_kv >= 8 ? 1 : shape.n_head_kv >= 3 ? 2 : 4);
  return std::max(kTileRows, kMaxStepRows);
}

}  // namespace

size_t attention_scratch_bytes(const AttentionShape& shape, size_t n_rows) {
  const size_t rows = std::min(n_rows, prefill_tile_rows(shape));
  return kCounterBytes + rows * shape.n_head * kSplits * (2 + shape.head_dim_v) * sizeof(float);
}

void clear_attention_scratch(void* scratch, size_t bytes, void* stream) {
  check_cuda(cudaMemsetAsync(scratch, 0, bytes, static_cast<cudaStream_t>(stream)), "clear attention scratch");
}

namespace {

// Whether a launch of n_rows rows takes the prefill kernel: decode groups
// (1..4 rows of distinct sessions) share nothing, so they keep the decode
// kernel; a step of more rows holds a prefill segment, whose rows share
// their session's K/V. Both give every row the same bits. (Decode groups on
// the prefill kernel, one row and a KV head's 4 query heads per block,
// measured slower on llama3-8b Q4_0: 415 / 754 / 1,168 tok/s at 1 / 2 / 4
// rows against 479 / 877 / 1,285, device call s9-13.)
constexpr size_t kSharedKvMinRows = 5;

// Whether the decode kernel loads its first K/V rows before the dependent
// launch wait (MUSER_CUDA_ATTENTION_PREFETCH=0: after it, for A/B runs; the
// bits are the same either way). Once per process, like MUSER_CUDA_PDL.
bool prefetch_enabled() {
  static const bool enabled = !env_is("MUSER_CUDA_ATTENTION_PREFETCH", "0");
  return enabled;
}

// The prefill kernel's instantiation: NP pairs per lane, HG heads per
// warp, heads of 64 * NP dimensions (K and V) with constant strides and no
// lane checks or not.
using SharedKernel = decltype(&attention_shared_kernel<1, 1, true>);
template <int NP>
SharedKernel shared_kernel_np(int hg, bool full) {
  if (hg == 1) return full ? attention_shared_kernel<NP, 1, true> : attention_shared_kernel<NP, 1, false>;
  if (hg == 2) return full ? attention_shared_kernel<NP, 2, true> : attention_shared_kernel<NP, 2, false>;
  return full ? attention_shared_kernel<NP, 4, true> : attention_shared_kernel<NP, 4, false>;
}
SharedKernel shared_kernel(int np, int hg, bool full) {
  return np == 1   ? shared_kernel_np<1>(hg, full)
         : np == 2 ? shared_kernel_np<2>(hg, full)
         : np == 3 ? shared_kernel_np<3>(hg, full)
                   : shared_kernel_np<4>(hg, full);
}

// The dynamic shared memory a prefill block may stage in: the device's
// opt-in limit per block less the kernel's static rows_s. Past the 48 KiB a
// launch gets by default, each instantiation opts in once, up to that limit
// (thread-safe static initialization; the backend runs on device 0 only,
// and the attribute belongs to the function, not to a stream, so a capture
// allows it). The attribute is only a ceiling: a block still takes the
// shared memory its launch asks for, so occupancy is the launch's.
size_t prefill_staging_limit() {
  static const size_t limit = [] {
    const size_t optin = shared_memory_per_block_optin();
    if (optin == 0) throw InternalError("[cuda attention] the device's shared memory per block could not be asked");
    const int bytes = static_cast<int>(optin) - static_cast<int>(sizeof(SharedRow) * kSharedMaxWarps);
    for (int np = 1; np <= kMaxPairsPerLane; ++np) {
      for (const int hg : {1, 2, 4}) {
        for (const bool full : {false, true}) {
          check_cuda(cudaFuncSetAttribute(shared_kernel(np, hg, full), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          bytes),
                     "cudaFuncSetAttribute(attention prefill)");
        }
      }
    }
    return static_cast<size_t>(bytes);
  }();
  return limit;
}

void run_attention(const KvRows& kv, const AttentionShape& shape, const float* q, size_t n_rows, float* out,
                   void* scratch, const QuantizedOut& qo, AttentionKernel choice, int prefill_warps, void* stream) {
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
  unsigned* done = static_cast<unsigned*>(scratch);
  float* part_ms = reinterpret_cast<float*>(static_cast<char*>(scratch) + kCounterBytes);
  // The partials' values after the (max, sum) pairs of a launch of `tile_rows` rows.
  auto part_acc_for = [&](size_t tile_rows) {
    return part_ms + std::min(n_rows, tile_rows) * shape.n_head * kSplits * 2;
  };
  const int np = pairs_per_lane(shape);
  const int n_head = static_cast<int>(shape.n_head);
  const int group = static_cast<int>(shape.n_head / shape.n_head_kv);
  const int hd_k = static_cast<int>(shape.head_dim_k), hd_v = static_cast<int>(shape.head_dim_v);
  const int window = static_cast<int>(shape.window);
  if (prefill_warps < 0 || prefill_warps > kSharedMaxWarps) {
    throw InvalidArgument("[cuda attention] prefill blocks of " + std::to_string(prefill_warps) +
                          " warps: expected 1.." + std::to_string(kSharedMaxWarps) + " (0: the default)");
  }
  if (attention_mma_applies(shape)) {
    const bool rows_together =
        choice == AttentionKernel::Prefill || (choice == AttentionKernel::Auto && n_rows >= kSharedKvMinRows);
    attention_mma(kv, shape, q, n_rows, out, done, part_ms, prefill_tile_rows(shape), qo, rows_together,
                  prefetch_enabled(), s);
    return;
  }
  const bool shared_heads = group <= kSharedMaxWarps;
  if (choice == AttentionKernel::Prefill && !shared_heads) {
    throw InvalidArgument("[cuda attention] the prefill kernel takes at most " + std::to_string(kSharedMaxWarps) +
                          " query heads per KV head, got " + std::to_string(group));
  }
  if (choice == AttentionKernel::Prefill ||
      (choice == AttentionKernel::Auto && shared_heads && n_rows >= kSharedKvMinRows)) {
    // block_rows rows x kWarps shares x n_sub head sets per block, one warp each.
    const HeadSets sets = head_sets(group);
    const int per_row = kWarps * sets.n_sub;
    const int chunk = chunk_positions(np);
    struct Layout {
      int block_rows, capacity;
      size_t smem;
    };
    auto layout_for = [&](int warps) {
      const int block_rows = std::max(1, warps / per_row);
      const int capacity = chunk + block_rows - 1;
      return Layout{block_rows, capacity, prefill_smem_bytes(shape, capacity, block_rows, group)};
    };
    // At most 2 x (32 + 3) positions x 1 KiB (heads of 256) = 70 KiB of
    // staging and 66 KiB of states (16 query heads of 256 per KV head);
    // llama3-8b takes 99.5 KiB at the default 16 warps, 81 KiB at 8. On a
    // GPU whose limit per block is smaller (99 KiB on compute capability 8.6
    // and 8.9), the default halves its warps until the block fits, down to
    // one row a block (the same bits at any count); a shape that fits no
    // block keeps the decode kernel under Auto.
    int warps = prefill_warps != 0 ? prefill_warps : default_prefill_warps();
    Layout layout = layout_for(warps);
    while (prefill_warps == 0 && warps / 2 >= per_row && layout.smem > prefill_staging_limit()) {
      warps /= 2;
      layout = layout_for(warps);
    }
    const int block_rows = layout.block_rows, capacity = layout.capacity;
    const size_t smem = layout.smem;
    if (smem <= prefill_staging_limit()) {
      const auto kernel = shared_kernel(np, sets.hg, hd_k == 64 * np && hd_v == 64 * np);
      const size_t tile_rows = prefill_tile_rows(shape);
      float* part_acc = part_acc_for(tile_rows);
      for (size_t row0 = 0; row0 < n_rows; row0 += tile_rows) {
        const int rows = static_cast<int>(std::min(tile_rows, n_rows - row0));
        const dim3 grid(static_cast<unsigned>(shape.n_head_kv), ceil_div(rows, block_rows));
        launch_dependent(kernel, grid, dim3(32 * block_rows * per_row), smem, s, kv, shape.n_layer, shape.layer,
                         shape.ring, n_head, group, hd_k, hd_v, window, shape.scale, q, row0, rows, block_rows,
                         sets.n_sub, capacity, part_ms, part_acc, out, qo);
        check_launch("attention (prefill)");
      }
      return;
    }
    if (choice == AttentionKernel::Prefill) {
      throw InvalidArgument("[cuda attention] the prefill kernel's shared memory of " + std::to_string(smem) +
                            " bytes is over this GPU's " + std::to_string(prefill_staging_limit()) + " per block");
    }
    // Auto: the decode kernel below gives the same bits.
  }
  // One instantiation per number of dimension pairs a lane holds (heads of up to 64, 128, 192, 256).
  const auto kernel = np == 1   ? attention_partial_kernel<1>
                      : np == 2 ? attention_partial_kernel<2>
                      : np == 3 ? attention_partial_kernel<3>
                                : attention_partial_kernel<4>;
  float* part_acc = part_acc_for(kTileRows);
  for (size_t row0 = 0; row0 < n_rows; row0 += kTileRows) {
    const unsigned rows = static_cast<unsigned>(std::min(kTileRows, n_rows - row0));
    const dim3 grid(splits_used(kv, row0, rows, chunk_positions(np)), static_cast<unsigned>(n_head), rows);
    launch_dependent(kernel, grid, kThreads, 0, s, kv, shape.n_layer, shape.layer, shape.ring, n_head, group, hd_k,
                     hd_v, window, shape.scale, q, row0, part_ms, part_acc, done, out, qo, prefetch_enabled());
    check_launch("attention");
  }
}

}  // namespace

unsigned attention_splits(const int32_t* positions, size_t n_rows, int chunk) {
  int most = 1;
  for (size_t r = 0; r < n_rows; ++r) most = std::max(most, (positions[r] + chunk) / chunk);
  return static_cast<unsigned>(std::min(most, kSplits));
}

int attention_decode_chunk(const void* kernel) {
  if (kernel == reinterpret_cast<const void*>(attention_partial_kernel<1>)) return chunk_positions(1);
  if (kernel == reinterpret_cast<const void*>(attention_partial_kernel<2>)) return chunk_positions(2);
  if (kernel == reinterpret_cast<const void*>(attention_partial_kernel<3>)) return chunk_positions(3);
  if (kernel == reinterpret_cast<const void*>(attention_partial_kernel<4>)) return chunk_positions(4);
  return attention_mma_chunk(kernel);
}

void attention(const KvRows& kv, const AttentionShape& shape, const float* q, size_t n_rows, float* out,
               void* scratch, void* stream, AttentionKernel kernel, int prefill_warps) {
  run_attention(kv, shape, q, n_rows, out, scratch, QuantizedOut{}, kernel, prefill_warps, stream);
}

ActivationView attention_quantized(const KvRows& kv, const AttentionShape& shape, const float* q, size_t n_rows,
                                   float* out, void* scratch, ActivationFormat format, void* q_scratch,
                                   void* stream, AttentionKernel kernel, int prefill_warps) {
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
  run_attention(kv, shape, q, n_rows, out, scratch, qo, kernel, prefill_warps, stream);
  return view;
}

}  // namespace muser::cuda
