// The packed version of the tensor-core prefill GEMM, the default for Q4_0
// and Q4_K weights (MUSER_CUDA_GEMM=v1 turns it off): both operands reach it in the
// walk's order, so that a stage of a block is two contiguous chunks of
// global memory. On the H200 (2026-12-02) q 4096x4096 at 512 rows took 111
// us (v1 194), llama3-8b's 32 layers of matrices 45.4 ms (v1 82.5), pp512
// 8,123 tok/s (v1 5,141), bitwise the matvec in every test. ops_gemm_mma.cu says
// why the walk is bitwise the matvec's; the walk and the tree pushes here are
// v1's (ops_gemm_mma_v1.cu), and each term is T::add_scaled's bits, v1's
// (q4_0_magic_term, q4_k_magic_term); the data movement and the weights'
// decode differ.
//
// Why: v1, v3 and the TMA-less versions before all ran ~3 us per 8-unit
// stage whatever their warps and pipelining. In v1's stage a block moves its
// 64 x 8 (row, unit) pairs and 64 x 8 (output, unit) pairs from 32-unit
// strides, each pair its own sector (activation scales 4 bytes per sector,
// weight blocks of 18 bytes in 4-byte copies at 2-byte alignment), about
// 1,850 sectors and 4,600 copy instructions per block and stage, then
// decodes the weights between two barriers. Here a stage is:
//   activations: one 18 KiB chunk per 64-row tile and stage (the int8 quants
//     of the 8 units of each row, then the scale of each (row, unit)),
//     written by a small pack kernel per call (pack_activations_kernel,
//     ~2 MiB at 512 x 4096);
//   weights: one 10 KiB chunk per 64-output tile and stage (the nibble words
//     in the order the MMA's lanes read them, then the scales as floats),
//     written once at upload by gemm_pack_weights.
// So a stage is 7 16-byte cp.async per thread at fixed offsets, one barrier,
// and no decode pass: a weight fragment is one or two logic operations on a
// nibble word.
//
// The -8 of Q4_0: the packed copy keeps each nibble q as q ^ 8, which is
// q - 8 in 4-bit two's complement, so that nibble in the high half of a
// byte (low half zero) is the signed byte 16 (q - 8): one mask for the high
// nibbles, a shift and a mask for the low ones (packed_low_bytes). So the MMA
// (.s8 x .s8, accumulator start kMagicBits in every register) gives
// kMagicBits + 16 S with S = sum((q - 8) a), v1's int32, times 16, exactly
// (|16 S| <= 16 * 32 * 8 * 127 < 2^22, the magic convert's range). The
// packed scales are wd / 16, so one fma of those bits is S wd rounded once
// and a second adds the term (q4_0_magic_term, gemm_mma_parts.cuh, says why
// that is add_scaled's rounding): two float instructions a term, where
// converting S first took three (2026-12-07). (Session 11's
// version multiplied the plain nibbles (.u8) from a start of kMagicBits -
// 8 sum(a), packed per (row, unit) with the activations: the same S for two
// more 16-byte shared loads per slot and warp.)
//
// Q4_K (2026-12-07): a unit is a sub-block of a 256-element super-block,
// and its term is TypeQ4_K::add_scaled's, three fmas (q4_k_magic_term): the
// packed copy keeps the 32 nibbles plain in Q4_0's words, so the MMA (.s8 x
// .u8: the bytes are 16 q, up to 240) gives kMagicBits + 16 isum, and two
// scale sets, d sc / 16 and d_min mn, both exact; the packed activations
// carry two sets too, the super-block's d for each (row, unit) and the
// unit's sum of quants as a float (exact: |sum| <= 32 * 127). Its stage
// buffers are larger (128 KiB in four), so it runs the 64 x 64 block only.
//
// Units past n_units are packed as zero quants and zero scales on both
// sides: S = 0, and the term adds a zero to an accumulator that is never
// -0.0f (see v1's compute_slot), which leaves it as it is, as the matvec's
// +0.0f steps do. Rows and outputs past the matrix are computed and never
// stored.
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm_mma_parts.cuh"
#include "backend/cuda/launch_targets.cuh"
#include "core/env_switch.h"
#include "core/error.h"

namespace muser::cuda::gemm {
namespace {

// One (64-row tile, stage) chunk of packed activations, each part in the
// order the MMA's lanes (g = lane / 4, t = lane % 4) read it:
//   q      [64 rows][8 slots][32 bytes]  the unit's int8 quants
//   d      [4 m16 tiles][4 slot pairs][8 g]{d, d', d_next, d_next'}  the
//          scales of rows g, g + 8 for the pair's two slots
//   (Q4_K) the unit's quant sums as floats, in d's layout
constexpr int kActQBytes = kTileRows * kStageUnits * 32;
// The packed weights' chunks (kWQBytes, w_chunk_bytes): gemm_mma_parts.cuh.
static_assert(kTileRows * kStageUnits * 4 == kScaleSetBytes, "activation and weight scale sets alike");
constexpr int kScalePieces = kScaleSetBytes / 16;  // 16-byte pieces of a scale set

// A weight type's packed chunks: Q4_0 one scale set a side, Q4_K two.
template <typename T>
struct Packed {
  static_assert(std::is_same_v<T, TypeQ4_0> || std::is_same_v<T, TypeQ4_K>, "the packed GEMM's types");
  static constexpr bool kK = std::is_same_v<T, TypeQ4_K>;
  static constexpr int kScaleSets = kK ? 2 : 1;
  static constexpr int kActChunk = kActQBytes + kScaleSets * kScaleSetBytes;
  static constexpr int kWChunk = w_chunk_bytes(kScaleSets);
  using Scale = std::conditional_t<kK, Q4_KScale, Q4_0Scale>;
};

// A block's shape: kHalves 64-output weight tiles (1: 64 x 64 outputs, 8
// warps; 2: 64 x 128, 16 warps), each warp 32 rows x 16 outputs (2 m16 x 2
// n8 MMA tiles, 16 outputs a thread), 2 warps along rows. A stage buffer in
// shared memory holds the activation chunk and kHalves weight chunks, their
// quants with the 16-byte pieces of each row swizzled (piece c of row r at
// c ^ (r % 8), so that the 8 rows an ldmatrix phase or a 4-word load reads
// hit 8 different bank groups), their scales as packed. The wide block
// keeps tree levels 2..4 in shared memory (TreeStack), so that 512 threads
// fit in 128 registers each: 4 warps a scheduler instead of 2 to hide the
// MMAs' and shared loads' latencies (Nsight Compute on the 8-warp block,
// 2026-12-06: 0.92 eligible warps a scheduler, issue slots 51% busy).
template <int kHalves, typename T>
struct BlockShape {
  static constexpr int kThreads = 256 * kHalves;
  static constexpr int kOut = kTileOut * kHalves;
  static constexpr int kBufs = kHalves == 1 ? 4 : 3;  // stage buffers: copies run kBufs - 1 stages ahead
  static constexpr int kActChunk = Packed<T>::kActChunk, kWChunk = Packed<T>::kWChunk;
  static constexpr int kBufBytes = kActChunk + kHalves * kWChunk;
  static constexpr int kRegLevels = kHalves == 1 ? 5 : 2;  // tree levels in registers
  static constexpr int kStackBytes = (5 - kRegLevels) * kOutputs * kThreads * 4;
  static constexpr int kSmemBytes = kBufs * kBufBytes + kStackBytes;
  static_assert(kSmemBytes <= 227 * 1024, "one block's shared memory on sm_90");
  // A stage's copies per thread: activation quants (kActCopies), weight
  // quants (kWCopies per half), and the scale pieces (kPartPieces of each
  // part: the activations', then each half's), piece p = tid + j kThreads
  // for j < kScaleCopies where p is below (1 + kHalves) kPartPieces.
  static constexpr int kActCopies = kActQBytes / 16 / kThreads;
  static constexpr int kWCopies = kWQBytes / 16 / kThreads;
  static constexpr int kPartPieces = Packed<T>::kScaleSets * kScalePieces;
  static constexpr int kScaleCopies = ((1 + kHalves) * kPartPieces + kThreads - 1) / kThreads;
  static_assert(kActCopies * kThreads * 16 == kActQBytes && kWCopies >= 1 && kWCopies * kThreads * 16 == kWQBytes,
                "the copy loop's fixed split of a stage's pieces over the threads");
};

// The pending subtrees of the balanced tree (push_leaf): levels below
// kRegLevels in registers, the others in shared memory at `high`, this
// thread's first float, (level, output) pairs kThreads floats apart so that
// a warp's accesses hit 32 banks. Levels are only read after they are
// written, so neither part needs clearing.
template <int kRegLevels, int kThreads>
struct TreeStack {
  float low[kRegLevels > 0 ? kRegLevels : 1][kOutputs];
  float* high;
  __device__ __forceinline__ float get(int lv, int o) const {
    return lv < kRegLevels ? low[lv][o] : high[((lv - kRegLevels) * kOutputs + o) * kThreads];
  }
  __device__ __forceinline__ void set(int lv, int o, float v) {
    if (lv < kRegLevels) {
      low[lv][o] = v;
    } else {
      high[((lv - kRegLevels) * kOutputs + o) * kThreads] = v;
    }
  }
};

// push_leaf (gemm_mma_parts.cuh) on a TreeStack: the same adds in the same
// order (push_leaf_at finds it by argument-dependent lookup).
template <int kLevel, int kRegLevels, int kThreads>
__device__ __forceinline__ void push_leaf(float (&acc)[kOutputs], TreeStack<kRegLevels, kThreads>& stack) {
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
    float v = acc[o];
#pragma unroll
    for (int lv = 0; lv < kLevel; ++lv) v = stack.get(lv, o) + v;
    if constexpr (kLevel < 5) {
      stack.set(kLevel, o, v);
      acc[o] = 0.0f;
    } else {
      acc[o] = v;
    }
  }
}

__host__ __device__ constexpr size_t ceil_tiles(size_t n, size_t tile) { return (n + tile - 1) / tile; }

__device__ __forceinline__ void ldmatrix_x4_at(int (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Grid: (row tiles, block output tiles of all the targets, target after
// target); row tiles vary fastest, so the blocks that share a weight tile
// run together and read it from L2.
//
// The stage loop: at the top of iteration s, this thread's copies of stage s
// have landed (wait_group), then the barrier makes everyone's visible and
// says every warp is done with stage s - 1, whose buffer then receives stage
// s + kBufs - 1.
template <typename T, int kP, int kHalves>
__global__ void __launch_bounds__(BlockShape<kHalves, T>::kThreads, 1)
    gemm_packed_kernel(DecodeTargets targets, const uint8_t* __restrict__ x_pack, int stages_per_class,
                       size_t n_rows) {
  using Shape = BlockShape<kHalves, T>;
  constexpr int kThreads = Shape::kThreads, kBufs = Shape::kBufs, kBufBytes = Shape::kBufBytes;
  constexpr int kActChunk = Shape::kActChunk, kWChunk = Shape::kWChunk;
  constexpr bool kK = Packed<T>::kK;
  using Scale = typename Packed<T>::Scale;
  // This block's target (its packed weights as w) and output tile within it.
  const BlockTarget bt = block_target(targets, blockIdx.y);
  const uint8_t* __restrict__ w_pack = bt.w;
  const size_t n_out = bt.n_out, ld_y = bt.ld_y;
  float* __restrict__ y = bt.y;
  const unsigned out_tile = blockIdx.y - bt.first;
  dependent_launch_begin();  // before the first read of the packed activations (dependent_launch.cuh)
  extern __shared__ int4 smem_packed[];
  const unsigned smem0 = smem_addr(smem_packed);
  // 16-byte loads at a byte offset into shared memory (plain loads: ordered
  // by the barriers). Offsets are multiples of 16 by construction; a byte
  // pointer keeps the compiler from masking each one to that.
  auto lds128 = [&](unsigned offset) {
    return *reinterpret_cast<const int4*>(reinterpret_cast<const uint8_t*>(smem_packed) + offset);
  };
  const Walk<kP> walk{stages_per_class};
  const int n_stages = walk.n_stages();

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row = (warp % 2) * kWarpRows, warp_out = (warp / 2) * kWarpOut;
  const size_t r0 = static_cast<size_t>(blockIdx.x) * kTileRows;
  const size_t n0 = static_cast<size_t>(out_tile) * Shape::kOut;
  const bool warp_active = r0 + warp_row < n_rows && n0 + warp_out < n_out;

  // This thread's 16-byte pieces of every stage, at fixed offsets from the
  // stage's chunks: activation quants (rows tid / 16 + j kThreads / 16,
  // piece tid % 16 of the row, j < kActCopies), weight quants of each half
  // (outputs tid / 8 + j kThreads / 8, piece tid % 8, j < kWCopies), and
  // its scale pieces (BlockShape: the activations', then each half's in
  // turn). Each j steps 16 kThreads bytes on both sides (rows and outputs
  // keep their swizzle: kThreads / 16 and / 8 are multiples of 8). A half
  // past the target's outputs copies nothing (its warps are inactive).
  const uint8_t* act_src = opaque(x_pack + static_cast<size_t>(blockIdx.x) * n_stages * kActChunk + 16 * tid);
  const uint8_t* w_src = opaque(w_pack + static_cast<size_t>(out_tile) * kHalves * n_stages * kWChunk + 16 * tid);
  const bool half1_exists = kHalves == 2 && n0 + kTileOut < n_out;
  const int qrow = tid / 16;
  const unsigned act_q_dst = opaque(static_cast<unsigned>(qrow * 256 + 16 * ((tid % 16) ^ (qrow % 8))));
  const int wcol = tid / 8;
  const unsigned w_q_dst = opaque(static_cast<unsigned>(kActChunk + wcol * 128 + 16 * ((tid % 8) ^ (wcol % 8))));
  // The scale pieces: source chunk (part 0 activations, 1 + h weight half
  // h) and offsets.
  const unsigned half_stride = static_cast<unsigned>(n_stages) * kWChunk;  // weight half 1 from half 0
  bool copies_scale[Shape::kScaleCopies];
  unsigned sc_dst[Shape::kScaleCopies], sc_chunk[Shape::kScaleCopies];
  const uint8_t* sc_src[Shape::kScaleCopies];
#pragma unroll
  for (int j = 0; j < Shape::kScaleCopies; ++j) {
    const int p = tid + j * kThreads;
    const int sc_part = p / Shape::kPartPieces, sc_piece = p % Shape::kPartPieces;
    copies_scale[j] = sc_part <= kHalves && (sc_part < 2 || half1_exists);
    sc_dst[j] = opaque(static_cast<unsigned>(sc_part == 0 ? kActQBytes + 16 * sc_piece
                                                          : kActChunk + (sc_part - 1) * kWChunk + kWQBytes + 16 * sc_piece));
    sc_src[j] = opaque(sc_part == 0 ? act_src - 16 * tid + kActQBytes + 16 * sc_piece
                                    : w_src - 16 * tid + (sc_part - 1) * half_stride + kWQBytes + 16 * sc_piece);
    sc_chunk[j] = sc_part == 0 ? kActChunk : kWChunk;  // the scale piece's stride per stage
  }
  auto issue = [&](int stage, int buf) {
    if (stage < n_stages) {
      const uint8_t* a = act_src + static_cast<size_t>(stage) * kActChunk;
      const uint8_t* b = w_src + static_cast<size_t>(stage) * kWChunk;
      const unsigned dst = smem0 + buf * kBufBytes;
#pragma unroll
      for (int j = 0; j < Shape::kActCopies; ++j) {
        cp_async16_to(dst + act_q_dst + 16 * kThreads * j, a + 16 * kThreads * j, 16);
      }
#pragma unroll
      for (int j = 0; j < Shape::kScaleCopies; ++j) {
        if (copies_scale[j]) cp_async16_to(dst + sc_dst[j], sc_src[j] + static_cast<size_t>(stage) * sc_chunk[j], 16);
      }
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        if (h == 0 || half1_exists) {
#pragma unroll
          for (int j = 0; j < Shape::kWCopies; ++j) {
            cp_async16_to(dst + kWChunk * h + w_q_dst + 16 * kThreads * j, b + half_stride * h + 16 * kThreads * j,
                          16);
          }
        }
      }
    }
    cp_async_commit();  // an empty group past the last stage keeps the wait count uniform
  };

  // Per-lane shared-memory offsets inside a stage buffer.
  // A (ldmatrix x4 of m16 tile mi, slot s): lane L gives row L % 8 + 8 ((L / 8) % 2) of the tile, half L / 16;
  // that row's piece 2 s + half sits at (2 s + half) ^ (row % 8) = (2 s ^ (row % 8 & 6)) + (half ^ (row % 2)).
  // Each offset is one register per lane; the MMA tiles' offsets differ
  // from it by constants (m16 tile mi of A: 16 rows = 4096 bytes further, the
  // same swizzle as rows agree mod 8; n8 tile ni of B: 8 outputs = 1024
  // bytes, the same swizzle; the scales: 512 and 256 bytes).
  const int mat = lane / 8, mat_row = lane % 8;
  const int a_row = warp_row + mat_row + 8 * (mat & 1);
  const unsigned a_off = opaque(static_cast<unsigned>(a_row * 256 + 16 * ((mat >> 1) ^ (a_row & 1))));
  const unsigned a_xor = 16 * (mat_row & 6);
  // The warp's weight half and its outputs within it.
  const unsigned w_half = kWChunk * (warp_out / kTileOut);  // from the first weight chunk
  const int half_out = warp_out % kTileOut;
  // B (4 words of slots 4 h .. 4 h + 3 of output g of n8 tile ni): piece 2 t + h of the output's 128 bytes,
  // at (2 t + h) ^ (output % 8) with output % 8 = g.
  unsigned b_off[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    b_off[h] = opaque(static_cast<unsigned>(kActChunk + w_half + (half_out + g) * 128 + 16 * ((2 * t + h) ^ g)));
  }
  // Activation scales (+ 128 a slot pair) of m16 tile 0; weight scales (+ 64
  // a pair) of n8 tile 0. Q4_K's second sets are kScaleSetBytes further.
  const unsigned ad_off = opaque(static_cast<unsigned>(kActQBytes + ((warp_row / 16) * 32 + g) * 16));
  const unsigned wd_off = opaque(static_cast<unsigned>(kActChunk + w_half + kWQBytes + ((half_out / 8) * 16 + t) * 16));

  float acc[kOutputs];
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) acc[o] = 0.0f;
  TreeStack<Shape::kRegLevels, kThreads> stack;
  stack.high = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(smem_packed) + kBufs * kBufBytes) + tid;

  // One slot: the unit's 4 MMAs and the float terms of the 16 outputs (v1's
  // bits and order), then a class push known at compile time. wq4[ni] holds
  // the weight words of slots 4 (kSlot / 4) .. + 3; ad4, bs4 (Q4_K) and ws
  // the scales of slots kSlot & ~1 and kSlot | 1 (ws[ni]: {d, d', d_next,
  // d_next'}).
  auto compute_slot = [&]<int kSlot>(unsigned buf_off, const int4 (&wq4)[2], const float4 (&ad4)[2],
                                     const float4 (&bs4)[2], const Scale (&ws)[2][4]) {
    constexpr int kWord = kSlot % 4;
    constexpr bool kOdd = kSlot % 2 == 1;
    int a[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) ldmatrix_x4_at(a[mi], smem0 + buf_off + a_off + 4096 * mi + ((32 * kSlot) ^ a_xor));
    float ad[2][2], bs[2][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      ad[mi][0] = kOdd ? ad4[mi].z : ad4[mi].x;
      ad[mi][1] = kOdd ? ad4[mi].w : ad4[mi].y;
      bs[mi][0] = kOdd ? bs4[mi].z : bs4[mi].x;
      bs[mi][1] = kOdd ? bs4[mi].w : bs4[mi].y;
    }
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) {
      const unsigned w = static_cast<unsigned>(kWord == 0   ? wq4[ni].x
                                               : kWord == 1 ? wq4[ni].y
                                               : kWord == 2 ? wq4[ni].z
                                                            : wq4[ni].w);
      const int b0 = packed_low_bytes(w), b1 = packed_high_bytes(w);
      const Scale w0 = ws[ni][kOdd ? 2 : 0], w1 = ws[ni][kOdd ? 3 : 1];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        int d[4];
        if constexpr (kK) {
          mma_s8u8(d, a[mi], b0, b1, kMagicBits);
        } else {
          mma_s8(d, a[mi], b0, b1, kMagicBits);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int o = (mi * 2 + ni) * 4 + c;
          if constexpr (kK) {
            acc[o] = q4_k_magic_term(acc[o], d[c], (c & 1) ? w1 : w0, bs[mi][c >> 1], ad[mi][c >> 1]);
          } else {
            acc[o] = q4_0_magic_term(acc[o], d[c], (c & 1) ? w1 : w0, ad[mi][c >> 1]);
          }
        }
      }
    }
    if constexpr (kP < 8) {
      constexpr int kClass = kSlot / kP;  // within the stage
      if constexpr (kSlot % kP == kP - 1 && kClass < Walk<kP>::kClassesPerStage - 1) {
        push_leaf<trailing_ones(kClass)>(acc, stack);
      }
    }
  };
  // Slots 2 kPair and 2 kPair + 1: their scales in one load per row / output pair.
  auto as_float4 = [](const int4& v) {
    return make_float4(__int_as_float(v.x), __int_as_float(v.y), __int_as_float(v.z), __int_as_float(v.w));
  };
  auto compute_pair = [&]<int kPair>(unsigned buf_off, const int4 (&wq4)[2]) {
    float4 ad4[2], bs4[2];
    Scale ws[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const unsigned ad_at = buf_off + ad_off + 512 * i + 128 * kPair;
      const unsigned wd_at = buf_off + wd_off + 256 * i + 64 * kPair;
      ad4[i] = as_float4(lds128(ad_at));
      const float4 wd4 = as_float4(lds128(wd_at));
      if constexpr (kK) {
        bs4[i] = as_float4(lds128(ad_at + kScaleSetBytes));
        const float4 wm4 = as_float4(lds128(wd_at + kScaleSetBytes));
        ws[i][0] = q4_k_scale(wd4.x, wm4.x);
        ws[i][1] = q4_k_scale(wd4.y, wm4.y);
        ws[i][2] = q4_k_scale(wd4.z, wm4.z);
        ws[i][3] = q4_k_scale(wd4.w, wm4.w);
      } else {
        bs4[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // unused
        ws[i][0] = q4_0_scale(wd4.x);
        ws[i][1] = q4_0_scale(wd4.y);
        ws[i][2] = q4_0_scale(wd4.z);
        ws[i][3] = q4_0_scale(wd4.w);
      }
    }
    compute_slot.template operator()<2 * kPair>(buf_off, wq4, ad4, bs4, ws);
    compute_slot.template operator()<2 * kPair + 1>(buf_off, wq4, ad4, bs4, ws);
  };
  // A stage: slots 0..3 with the first weight words, 4..7 with the second.
  auto compute_stage = [&](unsigned buf_off) {
    int4 wq4[2];
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) wq4[ni] = lds128(buf_off + b_off[0] + 1024 * ni);
    compute_pair.template operator()<0>(buf_off, wq4);
    compute_pair.template operator()<1>(buf_off, wq4);
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) wq4[ni] = lds128(buf_off + b_off[1] + 1024 * ni);
    compute_pair.template operator()<2>(buf_off, wq4);
    compute_pair.template operator()<3>(buf_off, wq4);
  };

#pragma unroll
  for (int s = 0; s < kBufs - 1; ++s) issue(s, s);
  for (int s = 0; s < n_stages; ++s) {
    cp_async_wait<kBufs - 2>();  // this thread's copies of stage s
    __syncthreads();             // everyone's; and everyone is done with stage s - 1
    issue(s + kBufs - 1, (s + kBufs - 1) % kBufs);
    if (warp_active) compute_stage((s % kBufs) * kBufBytes);
    // The stage's last class ends here (kP == 8: when this is its last stage).
    if (walk.ends_class(s)) push_leaf_at(__ffs(~walk.last_class(s)) - 1, acc, stack);
  }
  cp_async_wait<0>();

  // acc now holds each output's total (the last leaf merged every level).
  store_warp_outputs(acc, r0 + warp_row, n0 + warp_out, g, t, n_rows, n_out, y, ld_y);
}

// Item i of a pack kernel's grid, one per (tile, stage, line, slot) with
// kLines lines (activation rows or outputs) per tile: its chunk (tile *
// n_stages + stage), its line in the tile and in the matrix, its slot, and
// the unit the walk puts in that slot.
template <int kP, int kLines>
struct PackItem {
  int slot, line, unit;
  size_t chunk, index;
  __device__ __forceinline__ PackItem(size_t i, const Walk<kP>& walk)
      : slot(static_cast<int>(i % kStageUnits)),
        line(static_cast<int>(i / kStageUnits % kLines)),
        chunk(i / (kStageUnits * kLines)) {
    index = chunk / walk.n_stages() * kLines + line;
    unit = walk.unit(static_cast<int>(chunk % walk.n_stages()), slot);
  }
};

// The offset of (row or output `line`, slot) in a chunk's scale set: the
// pair-major layout both sides share (the activations' per m16 tile, row g
// + 8 hh; the weights' per n8 tile, output 2 t + c).
__device__ __forceinline__ int act_scale_offset(int row, int slot) {
  const int mt = row / 16, g = row % 8, hh = row / 8 % 2;
  return ((mt * 4 + slot / 2) * 8 + g) * 16 + 4 * (2 * (slot % 2) + hh);
}
__device__ __forceinline__ int weight_scale_offset(int col, int slot) {
  return ((col / 8 * 4 + slot / 2) * 4 + col % 8 / 2) * 16 + 4 * (2 * (slot % 2) + col % 2);
}

// One thread per (row tile, stage, row, slot): the unit's 32 quants and its
// scales (Q8_0: d; Q8_K: the super-block's d, then the unit's quant sum);
// zeros past the rows or units.
template <typename T, int kP>
__global__ void pack_activations_kernel(ActivationView x, size_t n_rows, int stages_per_class, size_t n_items,
                                        uint8_t* __restrict__ pack) {
  constexpr bool kK = Packed<T>::kK;
  dependent_launch_begin();  // before reading the activations an earlier kernel wrote
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_items) return;
  const PackItem<kP, kTileRows> item(i, Walk<kP>{stages_per_class});
  const int slot = item.slot, row = item.line, u = item.unit;
  const size_t chunk = item.chunk, r = item.index;
  const int n_units = static_cast<int>(x.k / 32);
  int4 lo = make_int4(0, 0, 0, 0), hi = lo;
  float scale = 0.0f, sum = 0.0f;
  if (r < n_rows && u < n_units) {
    const int4* src = reinterpret_cast<const int4*>(x.q + (r * n_units + u) * 32);
    lo = src[0];
    hi = src[1];
    if constexpr (kK) {
      scale = x.d[r * (n_units / 8) + u / 8];
      const int32_t* bsum = x.bsum + r * (2 * static_cast<size_t>(n_units)) + 2 * u;
      sum = static_cast<float>(bsum[0] + bsum[1]);
    } else {
      scale = x.d[r * n_units + u];
    }
  }
  uint8_t* c = pack + chunk * Packed<T>::kActChunk;
  int4* dst = reinterpret_cast<int4*>(c + (row * kStageUnits + slot) * 32);
  dst[0] = lo;
  dst[1] = hi;
  uint8_t* scales = c + kActQBytes + act_scale_offset(row, slot);
  *reinterpret_cast<float*>(scales) = scale;
  if constexpr (kK) *reinterpret_cast<float*>(scales + kScaleSetBytes) = sum;
}

// Q4_K's packed word t of sub-block `sub` (Q4_0's word layout: byte i's
// low nibble element 4 t + i, its high one element 16 + 4 t + i) from the
// sub-block's 32 quant bytes, whose byte j holds element j in its low
// nibble for even sub-blocks, its high one for odd.
__device__ __forceinline__ unsigned q4_k_packed_word(const uint8_t* quants, int sub, int t) {
  const uint32_t first = load_u32_a4(quants + 4 * t), second = load_u32_a4(quants + 16 + 4 * t);
  if (sub % 2 == 0) return (first & 0x0f0f0f0fu) | ((second & 0x0f0f0f0fu) << 4);
  return ((first >> 4) & 0x0f0f0f0fu) | (second & 0xf0f0f0f0u);
}

// One thread per (output tile, stage, output, slot): see kWChunk (Q4_K:
// gemm_mma_parts.cuh and the top of this file).
template <typename T, int kP>
__global__ void pack_weights_kernel(const uint8_t* __restrict__ w, size_t n_out, int n_units, int stages_per_class,
                                    size_t n_items, uint8_t* __restrict__ pack) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_items) return;
  const PackItem<kP, kTileOut> item(i, Walk<kP>{stages_per_class});
  const int slot = item.slot, col = item.line, u = item.unit;
  const size_t chunk = item.chunk, n = item.index;
  uint32_t words[4] = {0, 0, 0, 0};
  float scale = 0.0f, min = 0.0f;
  if (n < n_out && u < n_units) {
    if constexpr (Packed<T>::kK) {
      const uint8_t* block = w + (n * (n_units / 8) + u / 8) * T::kBlockBytes;
      const int sub = u % 8;
      int sc, mn;
      k4_scale_min(block + 4, sub, sc, mn);
      // d sc and d_min mn are exact (11 and 6 significant bits), and so is d sc / 16.
      scale = packed_scale(__fmul_rn(f16_bits_to_f32(load_u16(block)), static_cast<float>(sc)));
      min = __fmul_rn(f16_bits_to_f32(load_u16(block + 2)), static_cast<float>(mn));
#pragma unroll
      for (int wt = 0; wt < 4; ++wt) words[wt] = q4_k_packed_word(block + 16 + 32 * (sub / 2), sub, wt);
    } else {
      const uint8_t* block = w + (n * n_units + u) * T::kBlockBytes;
      scale = packed_scale(f16_bits_to_f32(load_u16(block)));
#pragma unroll
      for (int wt = 0; wt < 4; ++wt) words[wt] = q4_0_packed_word(load_u32_a2(block + 2 + 4 * wt));
    }
  }
  uint8_t* c = pack + chunk * Packed<T>::kWChunk;
  uint32_t* q = reinterpret_cast<uint32_t*>(c) + col * 32 + slot;
#pragma unroll
  for (int wt = 0; wt < 4; ++wt) q[8 * wt] = words[wt];
  uint8_t* scales = c + kWQBytes + weight_scale_offset(col, slot);
  *reinterpret_cast<float*>(scales) = scale;
  if constexpr (Packed<T>::kK) *reinterpret_cast<float*>(scales + kScaleSetBytes) = min;
}

size_t stages_of(size_t k) {
  size_t n = 0;
  with_walk(k, [&]<int kP>(int stages_per_class) { n = Walk<kP>{stages_per_class}.n_stages(); });
  return n;
}

// Calls f.template operator()<T>() for the packed GEMM's types.
template <typename F>
void with_packed_type(DType type, F&& f) {
  switch (type) {
    case DType::Q4_0: f.template operator()<TypeQ4_0>(); return;
    case DType::Q4_K: f.template operator()<TypeQ4_K>(); return;
    default: throw InternalError(std::string("[cuda gemm] the packed GEMM takes no ") + dtype_info(type).name);
  }
}

}  // namespace

size_t packed_weight_bytes(DType type, size_t n_out, size_t k) {
  size_t chunk = 0;
  with_packed_type(type, [&]<typename T>() { chunk = Packed<T>::kWChunk; });
  return ceil_tiles(n_out, kTileOut) * stages_of(k) * chunk;
}

size_t packed_activation_bytes(DType type, size_t n_rows, size_t k) {
  size_t chunk = 0;
  with_packed_type(type, [&]<typename T>() { chunk = Packed<T>::kActChunk; });
  return ceil_tiles(n_rows, kTileRows) * stages_of(k) * chunk;
}

void pack_weights(DType type, const void* w, size_t n_out, size_t k, void* dst, cudaStream_t stream) {
  with_packed_type(type, [&]<typename T>() {
    with_walk(k, [&]<int kP>(int stages_per_class) {
      const size_t n_stages = Walk<kP>{stages_per_class}.n_stages();
      const size_t n_items = ceil_tiles(n_out, kTileOut) * n_stages * kTileOut * kStageUnits;
      if (n_items == 0) return;
      pack_weights_kernel<T, kP><<<static_cast<unsigned>(ceil_tiles(n_items, 256)), 256, 0, stream>>>(
          static_cast<const uint8_t*>(w), n_out, static_cast<int>(k / 32), stages_per_class, n_items,
          static_cast<uint8_t*>(dst));
      check_launch("gemm pack_weights");
    });
  });
}

namespace {

// The block shape of a launch over n_rows rows whose targets take
// `wide_tiles` 128-output tiles: the 64 x 128 block of 16 warps
// (BlockShape<2>) where its grid still covers every SM at least once, the
// 64 x 64 block of 8 warps otherwise. Forced wide on an H200 (2026-12-06),
// llama3-8b Q4_0 pp512 went from 9,712 to 9,999 tok/s (its launches have
// 256 to 1,792 wide blocks) and smollm2-135m's from 97,380 to 83,945 (8 to
// 60 wide blocks: half the blocks on an idle GPU). Chosen this way on an
// H100: llama3-8b 10,181 against 10,007 with the narrow block everywhere,
// smollm2-135m 103,990 against 106,238 (its gate/up launch, 192 wide
// blocks, takes them). MUSER_CUDA_GEMM_WIDE=1 or 0 forces one shape for A/B
// runs (the same bits either way), where the device's blocks may take the
// wide block's shared memory (else the narrow block always). Both read once
// (the backend runs on device 0 only).
bool wide_blocks(size_t n_rows, unsigned wide_tiles) {
  if (!packed_block_fits(DType::Q4_0, true)) return false;
  static const int forced = env_is("MUSER_CUDA_GEMM_WIDE", "1") ? 1 : env_is("MUSER_CUDA_GEMM_WIDE", "0") ? 0 : -1;
  if (forced >= 0) return forced == 1;
  return ceil_tiles(n_rows, kTileRows) * wide_tiles >= static_cast<size_t>(multiprocessor_count());
}

}  // namespace

bool packed_block_fits(DType type, bool wide) {
  int bytes = 0;
  if (type == DType::Q4_K) {
    if (wide) return false;  // its wide block's 228 KiB are over every device's limit
    bytes = BlockShape<1, TypeQ4_K>::kSmemBytes;
  } else {
    bytes = wide ? BlockShape<2, TypeQ4_0>::kSmemBytes : BlockShape<1, TypeQ4_0>::kSmemBytes;
  }
  return static_cast<size_t>(bytes) <= shared_memory_per_block_optin();
}

void launch_gemm_packed(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x,
                        size_t n_rows, cudaStream_t stream) {
  if (n_rows == 0) return;
  with_packed_type(type, [&]<typename T>() {
    auto launch = [&]<int kHalves>() {
      using Shape = BlockShape<kHalves, T>;
      unsigned tiles = 0;
      const DecodeTargets packed = decode_targets(targets, count, Shape::kOut, true, tiles);
      if (tiles == 0) return;
      with_walk(x.k, [&]<int kP>(int stages_per_class) {
        const size_t n_stages = Walk<kP>{stages_per_class}.n_stages();
        const size_t n_items = ceil_tiles(n_rows, kTileRows) * n_stages * kTileRows * kStageUnits;
        launch_dependent(pack_activations_kernel<T, kP>, dim3(static_cast<unsigned>(ceil_tiles(n_items, 256))),
                         dim3(256), 0, stream, x, n_rows, stages_per_class, n_items,
                         static_cast<uint8_t*>(x.gemm_pack));
        check_launch("gemm pack_activations");
        static const cudaError_t opted_in =
            cudaFuncSetAttribute(gemm_packed_kernel<T, kP, kHalves>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(Shape::kSmemBytes));
        check_cuda(opted_in, "cudaFuncSetAttribute(gemm_packed)");
        const dim3 grid(ceil_div(n_rows, kTileRows), tiles);
        launch_dependent(gemm_packed_kernel<T, kP, kHalves>, grid, dim3(Shape::kThreads), Shape::kSmemBytes, stream,
                         packed, static_cast<const uint8_t*>(x.gemm_pack), stages_per_class, n_rows);
        check_launch("gemm_packed");
      });
    };
    if constexpr (Packed<T>::kK) {
      launch.template operator()<1>();
    } else {
      unsigned wide_tiles = 0;
      decode_targets(targets, count, BlockShape<2, T>::kOut, true, wide_tiles);
      if (wide_blocks(n_rows, wide_tiles)) {
        launch.template operator()<2>();
      } else {
        launch.template operator()<1>();
      }
    }
  });
}

}  // namespace muser::cuda::gemm
