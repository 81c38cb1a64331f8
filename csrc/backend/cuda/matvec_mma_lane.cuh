// What the two tensor-core decode matvec kernels share after their walks
// (ops_matvec_decode_mma.cu on the packed GEMM copy,
// ops_matvec_decode_mma_blocks.cu on the GGUF blocks): a lane's two
// (output, row) sums, the RoPE angles of its outputs, the join of a tile's
// subtrees at the class tree's nodes, the store with its epilogue, and the
// choice of how many subtrees a tile's classes are cut into.
//
// Both kernels run 8 warps a block; a warp computes one 16-output tile's
// m16n8k32 MMAs with B = the group's rows, each twice among the 8 columns,
// so lanes t = 0, 1 (t = lane % 4) own output g = lane / 4 and lanes
// t = 2, 3 output g + 8, rows 2 (t % 2) and 2 (t % 2) + 1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/launch_targets.cuh"
#include "backend/cuda/matvec_decode_kernel.cuh"

namespace muser::cuda::mma_decode {

constexpr int kWarps = 8;  // warps per block: (8 / kSplit) 16-output tiles x kSplit subtrees
constexpr int kJoinBytes = kWarps * 32 * 2 * 4;  // each warp's two sums per lane

// The lane's place: its warp's tile (out0: the tile's first output), its
// subtree (split) and its two sums' output and first row.
struct Lane {
  int warp, lane, split, r0;
  size_t out;
  bool active;  // the tile starts inside the matrix (a tile past it only joins the barriers)
};

__device__ __forceinline__ Lane lane_of(size_t out0, int split, const BlockTarget& bt) {
  Lane me;
  me.warp = static_cast<int>(threadIdx.x) / 32;
  me.lane = static_cast<int>(threadIdx.x) % 32;
  me.split = split;
  const int t = me.lane % 4;
  me.r0 = 2 * (t % 2);
  me.out = out0 + me.lane / 4 + (t >= 2 ? 8 : 0);
  me.active = out0 < bt.n_out;
  return me;
}

// The RoPE angles of the lane's two (output, row) sums (kEpilogueRopeKv;
// identity otherwise), taken before the dependent-launch wait: no kernel
// writes the positions or the frequencies (as matvec_decode_kernel).
template <int kRows, int kEpilogue>
__device__ __forceinline__ void rope_angles(const Lane& me, const BlockTarget& bt, const DecodeEpilogue& epilogue,
                                            float2 (&angle)[2]) {
  angle[0] = angle[1] = make_float2(1.0f, 0.0f);
  if constexpr (kEpilogue == kEpilogueRopeKv) {
    const uint32_t dim = static_cast<uint32_t>(me.out % epilogue.head_dim);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (bt.p < 2 && me.active && me.out < bt.n_out && me.r0 + j < kRows && dim < epilogue.n_rot) {
        angle[j] = rope_angle(dim, epilogue.positions[me.r0 + j], epilogue.position_scale, epilogue.inv_freq);
      }
    }
  }
}

// Stores the lane's two sums (rows r0, r0 + 1 of its output); every lane of
// the warp calls it (the epilogue's shuffle: the RoPE pair's other element
// is output ^ 1, held by lane ^ 4).
template <int kRows, int kEpilogue>
__device__ __forceinline__ void store_sums(const float (&v)[2], const Lane& me, const BlockTarget& bt,
                                           const DecodeEpilogue& epilogue, const float2 (&angle)[2]) {
  float other[2] = {0.0f, 0.0f};
  if constexpr (kEpilogue == kEpilogueRopeKv) {
#pragma unroll
    for (int j = 0; j < 2; ++j) other[j] = __shfl_xor_sync(0xffffffffu, v[j], 4);
  }
  if (!me.active || me.out >= bt.n_out) return;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int r = me.r0 + j;
    if (r >= kRows) continue;
    if constexpr (kEpilogue == kEpilogueRopeKv) {
      float value = v[j];
      const uint32_t dim = static_cast<uint32_t>(me.out % epilogue.head_dim);
      if (bt.p < 2 && dim < epilogue.n_rot) value = rope_rotate(v[j], other[j], dim, angle[j]);
      bt.y[r * bt.ld_y + me.out] = value;
      if (bt.p >= 1 && epilogue.kv.writes[r] != 0) {
        const int32_t pos = epilogue.kv.positions[r];
        const size_t slot =
            epilogue.ring ? static_cast<size_t>(pos % epilogue.kv.ring_rows[r]) : static_cast<size_t>(pos);
        uint16_t* plane = const_cast<uint16_t*>(
            epilogue.kv.tables[r][bt.p == 1 ? epilogue.layer : epilogue.n_layer + epilogue.layer]);
        plane[slot * bt.n_out + me.out] = f32_to_f16_bits(value);
      }
    } else {
      bt.y[r * bt.ld_y + me.out] = v[j];
    }
  }
}

// The lane's subtree totals joined at the class tree's nodes above the
// kSplit subtrees (left + right, level by level, through `join`:
// kJoinBytes of shared memory no warp still reads), then stored by the
// tile's split-0 warp. Every thread of the block calls it.
template <int kRows, int kSplit, int kEpilogue>
__device__ __forceinline__ void join_and_store(const float (&total)[2], float* join, const Lane& me,
                                               const BlockTarget& bt, const DecodeEpilogue& epilogue,
                                               const float2 (&angle)[2]) {
  if constexpr (kSplit == 1) {
    store_sums<kRows, kEpilogue>(total, me, bt, epilogue, angle);
  } else {
    join[(me.warp * 32 + me.lane) * 2] = total[0];
    join[(me.warp * 32 + me.lane) * 2 + 1] = total[1];
    __syncthreads();
    if (me.split != 0) return;
    float v[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float level[kSplit];
#pragma unroll
      for (int s = 0; s < kSplit; ++s) level[s] = join[((me.warp + s) * 32 + me.lane) * 2 + j];
#pragma unroll
      for (int width = kSplit; width > 1; width /= 2) {
#pragma unroll
        for (int s = 0; s < width / 2; ++s) level[s] = level[2 * s] + level[2 * s + 1];
      }
      v[j] = level[0];
    }
    store_sums<kRows, kEpilogue>(v, me, bt, epilogue, angle);
  }
}

// Blocks of a kernel per SM with `smem` bytes of shared memory each (their
// registers allow two).
inline int blocks_per_sm(size_t smem) {
  const int by_smem = static_cast<int>(shared_memory_per_multiprocessor() / (smem + 1024));  // 1 KiB reserved a block
  return by_smem < 1 ? 1 : by_smem > 2 ? 2 : by_smem;
}

// The subtrees per tile: the most (1, 2, 4, 8, at most max_split) whose
// blocks still run in one wave (blocks_per_sm on every SM), so that small
// matrices (llama3-8b's o, q/k/v, ffn_down) keep enough warps and bytes in
// flight; at least 1. allowed(s) says whether the walk can cut s subtrees.
template <typename Allowed>
int pick_split(size_t tiles16, int per_sm, Allowed allowed) {
  const size_t slots = static_cast<size_t>(per_sm) * multiprocessor_count();
  int split = 1;
  while (split < 8 && allowed(2 * split) && (tiles16 * 2 * split + kWarps - 1) / kWarps <= slots) split *= 2;
  return split;
}

// The kernel on the GGUF blocks (ops_matvec_decode_mma_blocks.cu), Q4_0
// targets: false (nothing enqueued) where it cannot read them (rows of a
// multiple of 8 blocks, every start 16-byte aligned); with `rope` (targets
// q, k, v) the RoPE + KV-store epilogue. split as matvec_decode_mma's
// (InvalidArgument for one that is not 4 or 8).
bool launch_blocks(const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows, int split,
                   const RopeKvTail* rope, cudaStream_t stream);

}  // namespace muser::cuda::mma_decode
