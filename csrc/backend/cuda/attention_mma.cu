// Attention on the tensor cores: the scores Q K^T and the weighted values
// P V as f16 MMAs (mma.m16n8k16, f32 accumulators), for every row count,
// decode and prefill alike, for heads of 64 or 128 dimensions (K and V
// alike) and up to 16 query heads per KV head. Other shapes keep the scalar
// kernels of ops_attention.cu; a model takes one family for all its rows.
//
// The partition is the scalar kernels' (attention_parts.cuh): a row's
// visible positions [first, pos] in chunks of kChunk counted from `first`,
// block z of kSplits taking chunks z, z + kSplits, ..., warp w of a block
// taking the kShare positions from w * kShare of each chunk (its share) with
// its own online softmax; the block folds its four shares in share order
// into the split's partial, and the last block of a tile folds each row's
// partials in split order.
//
// What is new is the unit a warp computes: an MMA tile of 16 (row, query
// head) slots of one KV head (its M), the rows of a tile reading the same
// planes with the same window start, so the same share positions. A decode
// row fills a tile alone (its group of query heads; llama3-8b's 4 of 16
// slots); a prefill block packs 16 / group consecutive rows (4 for
// llama3-8b), so each staged K/V position serves all of them. Per slot,
// every operation is a function of the slot's own query, its own positions
// and the staged K/V only:
// - a score is one chain of head_dim / 16 MMAs over the dimensions in
//   order, from zero; the tensor cores compute each output element the same
//   way wherever the slot and the position sit in the tile;
// - masked scores (past the row's position) are -inf, their weights 0; a
//   slot with no visible position in a share leaves its state untouched
//   (factor 1, weights 0), as the scalar kernels skip such groups;
// - the max and the sum over a share's positions reduce in one fixed tree
//   (each lane's values in order, then the quad's xor butterfly, whose adds
//   pair the same values on every lane);
// - the weights are rounded to f16 for the value MMA and the sum is taken
//   over the rounded weights, so the division normalizes what was added.
// So a row's bits do not depend on the tile it shares, the launch or the
// chunking (tests/cuda/test_cuda_prefill_attention.py runs both tilings).
//
// Queries are multiplied by the scale before their rounding to f16 (keys
// are stored as f16): the scores carry f16 rounding of q and K, the values
// that of the weights, within the parity bound against the CPU
// (tests/cuda/test_cuda_engine.py reports the figures).
#include "backend/cuda/attention_mma.h"

#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "backend/cuda/attention_parts.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm_mma_parts.cuh"
#include "core/env_switch.h"

namespace muser::cuda {
namespace {

using namespace attention_parts;

constexpr int kShare = 32;               // positions of a warp's share of a chunk
constexpr int kChunk = kWarps * kShare;  // positions of a chunk
constexpr int kSlots = 16;               // (row, query head) slots of a tile: the MMA's M
constexpr int kPad = 8;                  // halves after each staged row: ldmatrix rows 16 bytes apart mod 128

// gemm::ldmatrix_x4 (gemm_mma_parts.cuh) with each 8x8 matrix transposed: lane
// (g = L / 4, t = L % 4) receives column g's rows 2t and 2t + 1.
__device__ __forceinline__ void ldmatrix_x4_trans(int (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
// d += A (16x16 f16, row) * B (16x8 f16, col), f32 accumulators.
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], int b0, int b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ float2 unpack_half2(uint32_t u) {
  return __half22float2(*reinterpret_cast<const __half2*>(&u));
}

// A row of the block's tile (plain, for __shared__ storage).
struct TileRow {
  const __half* k;  // the row's K plane of the layer, at the block's KV head
  const __half* v;
  int pos, first, n_chunks, ring_rows;
  int floor;  // positions below it were written before this launch's writer ran
};

__device__ __forceinline__ bool same_positions(const TileRow& a, const TileRow& b) {
  return a.k == b.k && a.v == b.v && a.first == b.first && a.ring_rows == b.ring_rows;
}

// A run of the tile: rows [i0, i1) that read the same planes from the same
// window start, one MMA tile of (i1 - i0) * group slots.
struct Run {
  int i0, i1, first, max_pos, n_chunks, floor;
};

// One slot as a lane holds it: lane L holds slots L / 4 and L / 4 + 8 of
// the tile's accumulators.
struct Slot {
  bool valid;  // a real (row, head), not padding
  int pos;
};

// Grid (splits, n_head_kv, ceil(n_rows / tile_rows)), kThreads threads;
// dynamic shared memory: per warp, kShare staged K rows then kShare V rows
// of HD + kPad halves (the fold's states reuse it).
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_mma_kernel(KvRows kv, uint32_t n_layer, uint32_t layer, bool ring, int n_head, int group, int window,
                         float scale, const float* __restrict__ q, size_t row0, int n_rows, int tile_rows,
                         float* __restrict__ part_ms, float* __restrict__ part_acc, unsigned* __restrict__ done,
                         float* __restrict__ out, QuantizedOut qo, bool prefetch) {
  constexpr int kStride = HD + kPad;  // halves per staged row
  constexpr int kSteps = HD / 16;     // MMA k steps of a score; 16-dimension column pairs of a value row
  static_assert(HD == 64 || HD == 128, "heads of 64 or 128 dimensions");
  extern __shared__ uint4 smem_raw[];
  __shared__ __align__(16) TileRow rows_s[kSlots];
  __shared__ float fold_factors[kSlots][kWarps];  // a slot's share factors (ShareFold::f) of the current run
  const int z = blockIdx.x, kvh = blockIdx.y;
  const int local0 = static_cast<int>(blockIdx.z) * tile_rows;
  const int n_tile = min(tile_rows, n_rows - local0);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const size_t row_stride = static_cast<size_t>(n_head / group) * HD;  // halves per plane row
  // The positions and session tables are the step's inputs, which no
  // kernel writes: read before the dependent-launch wait.
  if (static_cast<int>(threadIdx.x) < n_tile) {
    const int local = local0 + static_cast<int>(threadIdx.x);
    const size_t r = row0 + local;
    TileRow t;
    t.pos = kv.positions[r];
    t.first = first_visible(t.pos, window);
    t.n_chunks = (t.pos + 1 - t.first + kChunk - 1) / kChunk;
    t.ring_rows = ring ? kv.ring_rows[r] : 0;
    t.k = reinterpret_cast<const __half*>(kv.tables[r][layer]) + static_cast<size_t>(kvh) * HD;
    t.v = reinterpret_cast<const __half*>(kv.tables[r][n_layer + layer]) + static_cast<size_t>(kvh) * HD;
    // A prefill chunk's rows are consecutive positions in row order: this
    // launch's writer wrote positions pos - local .. pos of the row's
    // session at the lowest (as in attention_partial_kernel).
    t.floor = t.pos - local;
    rows_s[threadIdx.x] = t;
  }
  __syncthreads();
  int max_chunks = 0;
  for (int i = 0; i < n_tile; ++i) max_chunks = max(max_chunks, rows_s[i].n_chunks);
  if (z >= max_chunks) return;  // the whole block, before any further barrier

  auto run_from = [&](int i0) {
    Run run{i0, i0 + 1, rows_s[i0].first, rows_s[i0].pos, rows_s[i0].n_chunks, rows_s[i0].floor};
    while (run.i1 < n_tile && (run.i1 - i0 + 1) * group <= kSlots && same_positions(rows_s[run.i1], rows_s[i0])) {
      const TileRow& t = rows_s[run.i1];
      run.max_pos = max(run.max_pos, t.pos);
      run.n_chunks = max(run.n_chunks, t.n_chunks);
      run.floor = min(run.floor, t.floor);
      ++run.i1;
    }
    return run;
  };

  __half* ks = reinterpret_cast<__half*>(smem_raw) + static_cast<size_t>(warp) * 2 * kShare * kStride;
  __half* vs = ks + kShare * kStride;
  // Stages positions [g0, g0 + kShare) of the run's planes into this warp's
  // rows, zeros past `count` (positions nobody may read yet), and commits.
  auto stage = [&](const TileRow& t, int g0, int count) {
    const bool wide = ((reinterpret_cast<uintptr_t>(t.k) | reinterpret_cast<uintptr_t>(t.v)) % 16) == 0 &&
                      row_stride % 8 == 0;
    const int unit = wide ? 8 : 2;  // halves per copy
    const int per_row = HD / unit;
    for (int i = lane; i < kShare * per_row; i += 32) {
      const int g = i / per_row, e = (i % per_row) * unit;
      const int p = g0 + g;
      const bool visible = g < count;
      const size_t slot = !visible ? 0 : ring ? static_cast<size_t>(p % t.ring_rows) : static_cast<size_t>(p);
      const __half* ksrc = t.k + slot * row_stride + e;
      const __half* vsrc = t.v + slot * row_stride + e;
      if (wide) {
        cp_async16(ks + g * kStride + e, ksrc, visible ? 16 : 0);
        cp_async16(vs + g * kStride + e, vsrc, visible ? 16 : 0);
      } else {
        cp_async4(ks + g * kStride + e, ksrc, visible ? 4 : 0);
        cp_async4(vs + g * kStride + e, vsrc, visible ? 4 : 0);
      }
    }
    cp_async_commit();
  };
  auto share_of = [&](const Run& run, int c, int& g0) {
    g0 = run.first + c * kChunk + warp * kShare;
    return min(kShare, run.max_pos + 1 - g0);  // warp-uniform; <= 0: nothing visible
  };

  // The first share of the first run may load before the wait where the
  // writer before this launch cannot be writing it.
  const Run first_run = run_from(0);
  bool ahead = false;
  {
    int g0;
    const int count = share_of(first_run, z, g0);
    if (prefetch && z < first_run.n_chunks && count > 0 && g0 + count <= first_run.floor) {
      stage(rows_s[0], g0, count);
      ahead = true;
    }
  }
  dependent_launch_begin();

  float* fold_ml = reinterpret_cast<float*>(smem_raw);      // (share, slot): m, l
  float* fold_acc = fold_ml + 2 * kWarps * kSlots;          // (share, slot, HD)
  const int quad = lane % 4;
  for (Run run = first_run;;) {
    const int n_slots = (run.i1 - run.i0) * group;
    // This lane's slots lane / 4 and lane / 4 + 8: the row's position and
    // its query (null for padding past the run's slots).
    auto slot_at = [&](int s, const float*& q_row) {
      Slot slot{s < n_slots, -1};
      q_row = nullptr;
      if (slot.valid) {
        const int i = run.i0 + s / group;
        slot.pos = rows_s[i].pos;
        const size_t r = row0 + local0 + i;
        q_row = q + (r * n_head + static_cast<size_t>(kvh) * group + s % group) * HD;
      }
      return slot;
    };
    const float *q_a, *q_b;
    const Slot sa = slot_at(lane / 4, q_a), sb = slot_at(lane / 4 + 8, q_b);
    // A's registers: (slot a, dims 2 quad..), (slot b, the same), (slot a,
    // dims 8 + 2 quad..), (slot b, the same), of each 16 dimensions.
    uint32_t qa[kSteps][4];
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) {
        const float* q_row = reg % 2 == 0 ? q_a : q_b;
        const int d = kk * 16 + (reg / 2) * 8 + 2 * quad;
        const float2 v = q_row != nullptr ? *reinterpret_cast<const float2*>(q_row + d) : make_float2(0.0f, 0.0f);
        qa[kk][reg] = pack_half2(__fmul_rn(v.x, scale), __fmul_rn(v.y, scale));
      }
    }

    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;
    float acc[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    for (int c = z; c < run.n_chunks; c += kSplits) {
      int g0;
      const int count = share_of(run, c, g0);
      if (count <= 0) continue;
      if (!(ahead && run.i0 == 0 && c == z)) stage(rows_s[run.i0], g0, count);
      cp_async_wait<0>();
      __syncwarp();

      // Scores of 4 column tiles of 8 positions: one chain over the dimensions each.
      float s[4][4];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < kSteps; kk += 2) {
          int b[4];
          gemm::ldmatrix_x4(b, ks + (t * 8 + lane % 8) * kStride + kk * 16 + (lane / 8) * 8);
          mma_f16(s[t], qa[kk], b[0], b[1]);
          mma_f16(s[t], qa[kk + 1], b[2], b[3]);
        }
      }
      const bool act_a = sa.valid && g0 <= sa.pos, act_b = sb.valid && g0 <= sb.pos;
      float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int p = g0 + t * 8 + 2 * quad + i % 2;
          const Slot& sl = i < 2 ? sa : sb;
          if (!(sl.valid && p <= sl.pos)) s[t][i] = -INFINITY;
        }
        mx_a = fmaxf(mx_a, fmaxf(s[t][0], s[t][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[t][2], s[t][3]));
      }
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
      const float mn_a = act_a ? fmaxf(ma, mx_a) : ma, mn_b = act_b ? fmaxf(mb, mx_b) : mb;
      const float corr_a = act_a ? expf(ma - mn_a) : 1.0f, corr_b = act_b ? expf(mb - mn_b) : 1.0f;
      // The weights, rounded to f16 as the value MMA takes them: A's
      // registers of k step j are column tiles 2j and 2j + 1.
      uint32_t pw[2][4];
      float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const uint32_t wa = pack_half2(act_a ? expf(s[t][0] - mn_a) : 0.0f, act_a ? expf(s[t][1] - mn_a) : 0.0f);
        const uint32_t wb = pack_half2(act_b ? expf(s[t][2] - mn_b) : 0.0f, act_b ? expf(s[t][3] - mn_b) : 0.0f);
        pw[t / 2][(t % 2) * 2] = wa;
        pw[t / 2][(t % 2) * 2 + 1] = wb;
        const float2 fa = unpack_half2(wa), fb = unpack_half2(wb);
        sum_a = __fadd_rn(__fadd_rn(sum_a, fa.x), fa.y);
        sum_b = __fadd_rn(__fadd_rn(sum_b, fb.x), fb.y);
      }
      sum_a = __fadd_rn(sum_a, __shfl_xor_sync(0xffffffffu, sum_a, 1));
      sum_a = __fadd_rn(sum_a, __shfl_xor_sync(0xffffffffu, sum_a, 2));
      sum_b = __fadd_rn(sum_b, __shfl_xor_sync(0xffffffffu, sum_b, 1));
      sum_b = __fadd_rn(sum_b, __shfl_xor_sync(0xffffffffu, sum_b, 2));
      if (act_a) {
        la = __fmaf_rn(la, corr_a, sum_a);
        ma = mn_a;
      }
      if (act_b) {
        lb = __fmaf_rn(lb, corr_b, sum_b);
        mb = mn_b;
      }
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        acc[n][0] = __fmul_rn(acc[n][0], corr_a);
        acc[n][1] = __fmul_rn(acc[n][1], corr_a);
        acc[n][2] = __fmul_rn(acc[n][2], corr_b);
        acc[n][3] = __fmul_rn(acc[n][3], corr_b);
      }
      // Values: B's registers of column tiles 2n and 2n + 1 (dimensions
      // 16n..16n+15) for k step j (positions 16j..16j+15), transposed.
#pragma unroll
      for (int n = 0; n < kSteps; ++n) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          int b[4];
          const int m = lane / 8;
          ldmatrix_x4_trans(b, vs + (16 * j + (m % 2) * 8 + lane % 8) * kStride + 16 * n + (m / 2) * 8);
          mma_f16(acc[2 * n], pw[j], b[0], b[1]);
          mma_f16(acc[2 * n + 1], pw[j], b[2], b[3]);
        }
      }
      __syncwarp();  // every lane's reads of the staged rows before the next share's copies
    }

    // The split's partials of the run's slots: the shares' states through
    // shared memory, folded in share order (fold_shares), as the scalar
    // kernels fold their warps.
    __syncthreads();  // every warp past its staged rows
    {
      const int slot_a = lane / 4, slot_b = lane / 4 + 8;
      if (quad == 0) {
        fold_ml[2 * (warp * kSlots + slot_a)] = ma;
        fold_ml[2 * (warp * kSlots + slot_a) + 1] = la;
        fold_ml[2 * (warp * kSlots + slot_b)] = mb;
        fold_ml[2 * (warp * kSlots + slot_b) + 1] = lb;
      }
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        const int d = n * 8 + 2 * quad;
        *reinterpret_cast<float2*>(fold_acc + (warp * kSlots + slot_a) * HD + d) = make_float2(acc[n][0], acc[n][1]);
        *reinterpret_cast<float2*>(fold_acc + (warp * kSlots + slot_b) * HD + d) = make_float2(acc[n][2], acc[n][3]);
      }
    }
    __syncthreads();
    // Each slot's fold (its shares' maxima, factors and sum) once, by thread
    // s, then every value pair from the factors.
    auto partial_of = [&](int s) {
      return ((static_cast<size_t>(local0) + run.i0 + s / group) * n_head + kvh * group + s % group) * kSplits + z;
    };
    auto split_holds = [&](int s) { return z < rows_s[run.i0 + s / group].n_chunks; };
    if (static_cast<int>(threadIdx.x) < n_slots && split_holds(threadIdx.x)) {
      const int s = threadIdx.x;
      float ms[kWarps], ls[kWarps];
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        ms[w] = fold_ml[2 * (w * kSlots + s)];
        ls[w] = fold_ml[2 * (w * kSlots + s) + 1];
      }
      const ShareFold fold = fold_shares(ms);
      store_fold(fold, ls, part_ms + 2 * partial_of(s));
#pragma unroll
      for (int w = 0; w < kWarps; ++w) fold_factors[s][w] = fold.f[w];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n_slots * (HD / 2); i += kThreads) {
      const int s = i / (HD / 2), d2 = i % (HD / 2);
      if (!split_holds(s)) continue;  // the split holds none of this row's positions
      ShareFold fold;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) fold.f[w] = fold_factors[s][w];
      reinterpret_cast<float2*>(part_acc + partial_of(s) * HD)[d2] = fold_pair(
          fold, [&](int w) { return reinterpret_cast<const float2*>(fold_acc + (w * kSlots + s) * HD)[d2]; });
    }
    __syncthreads();  // the states read before the next run stages over them
    if (run.i1 >= n_tile) break;
    run = run_from(run.i1);
  }

  // Last block of the tile in: fold each (row, head)'s partials in split order.
  if (!last_block_in(done + static_cast<size_t>(local0) * n_head + kvh * group, min(kSplits, max_chunks))) return;
  for (int k = warp; k < n_tile * group; k += kWarps) {
    const int i = k / group, h = kvh * group + k % group;
    const size_t local = static_cast<size_t>(local0) + i, r = row0 + local;
    const size_t first_elem = (r * n_head + h) * HD;
    combine_partials<HD / 32>(min(kSplits, rows_s[i].n_chunks), HD, (local * n_head + h) * kSplits, part_ms,
                              part_acc, out + first_elem, first_elem, qo, lane, 32);
  }
}

using MmaKernel = decltype(&attention_mma_kernel<128>);
MmaKernel mma_kernel(size_t head_dim) {
  return head_dim == 64 ? attention_mma_kernel<64> : attention_mma_kernel<128>;
}

size_t mma_smem_bytes(size_t head_dim) { return kWarps * 2 * kShare * (head_dim + kPad) * sizeof(__half); }

// Past the 48 KiB a launch gets by default, each instantiation opts in to
// its staging once (thread-safe static initialization; the attribute
// belongs to the function, so a capture allows it).
void opt_in_shared_memory() {
  static const bool done = [] {
    for (const size_t hd : {64, 128}) {
      check_cuda(cudaFuncSetAttribute(mma_kernel(hd), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(mma_smem_bytes(hd))),
                 "cudaFuncSetAttribute(attention mma)");
    }
    return true;
  }();
  (void)done;
}

}  // namespace

bool attention_mma_applies(const AttentionShape& shape) {
  // MUSER_CUDA_ATTENTION_MMA=0 keeps the scalar kernels for every shape, for
  // A/B runs (the two families' bits differ; each is exact on its own).
  // Read once per process: a model must not switch families mid-session.
  static const bool enabled = !env_is("MUSER_CUDA_ATTENTION_MMA", "0");
  // Heads of 64 and 128: the real models' (llama3, smollm2, qwen2, ...).
  // Heads of 32 (tiny test models only) stay scalar: their f16-rounded
  // scores took tiny F16/F32 models 0.0028 from llama.cpp's logits, past
  // the 0.002 of tests/integration/test_tiny_model_logits.py (H100, s15).
  const size_t hd = shape.head_dim_k;
  return enabled && hd == shape.head_dim_v && (hd == 64 || hd == 128) && shape.n_head_kv > 0 &&
         shape.n_head % shape.n_head_kv == 0 && shape.n_head / shape.n_head_kv <= kSlots;
}

int attention_mma_chunk(const void* kernel) {
  for (const size_t hd : {64, 128}) {
    if (kernel == reinterpret_cast<const void*>(mma_kernel(hd))) return kChunk;
  }
  return 0;
}

void attention_mma(const KvRows& kv, const AttentionShape& shape, const float* q, size_t n_rows, float* out,
                   unsigned* done, float* part_ms, size_t launch_rows, const QuantizedOut& qo, bool rows_together,
                   bool prefetch, cudaStream_t stream) {
  opt_in_shared_memory();
  const int n_head = static_cast<int>(shape.n_head);
  const int group = static_cast<int>(shape.n_head / shape.n_head_kv);
  // Decode rows (distinct sessions) share nothing: a tile each. A prefill
  // segment's rows share their session's K/V: as many as fill the slots.
  const int tile_rows = rows_together ? std::max(1, kSlots / group) : 1;
  float* part_acc = part_ms + std::min(n_rows, launch_rows) * shape.n_head * kSplits * 2;
  const auto kernel = mma_kernel(shape.head_dim_k);
  const size_t smem = mma_smem_bytes(shape.head_dim_k);
  for (size_t row0 = 0; row0 < n_rows; row0 += launch_rows) {
    const int rows = static_cast<int>(std::min(launch_rows, n_rows - row0));
    const dim3 grid(splits_used(kv, row0, rows, kChunk), static_cast<unsigned>(shape.n_head_kv),
                    ceil_div(rows, tile_rows));
    launch_dependent(kernel, grid, dim3(kThreads), smem, stream, kv, shape.n_layer, shape.layer, shape.ring, n_head,
                     group, static_cast<int>(shape.window), shape.scale, q, row0, rows, tile_rows, part_ms, part_acc,
                     done, out, qo, prefetch);
    check_launch("attention (tensor cores)");
  }
}

}  // namespace muser::cuda
