// Prefill matmul on the tensor cores (int8 mma.sync m16n8k32, sm_80+) for
// the 32-element quant types, bitwise the matvec's result for every output.
//
// Why this order: a row's logits must not depend on whether the row went
// through this GEMM (a prefill chunk) or through matvec_kernel (a decode
// group of 1..4 rows, a 1-row tail chunk). The matvec computes an output as
//   lane l (0..31): acc_l = 0; for u = l, l+32, ... : acc_l += T::dot(unit u)
//   then warp_sum: xor butterfly 16, 8, 4, 2, 1 over the 32 lane partials.
// With float + commutative, the butterfly is a balanced binary tree whose
// leaves, left to right, are the lanes in bit-reversed order (leaf i is lane
// bitrev5(i)): its first level pairs lanes that differ in bit 4. So here each
// output walks "classes" i = 0..31, lane l = bitrev5(i): the class's units
// l, l+32, ... in increasing order accumulate into one float exactly as lane
// l does (T::scale_sum is the float part of T::dot, shared by both kernels,
// and the build has --fmad=false), and the class partial is pushed onto a
// 5-level pairwise stack (a binary counter) that adds siblings as the tree
// does. Lanes without units give 0.0f leaves here too. tests/
// test_cuda_gemm_order.py checks the tree equivalence on float32 in numpy;
// tests/cuda/test_cuda_ops.py checks the GEMM against the matvec bitwise.
//
// The int32 block sum of a unit is exact from the MMA: one k32 step is one
// 32-element unit, with the int8 weights as T::load decodes them. The MMA
// accumulator starts at 1.5 * 2^23 (as int bits), so its result read as a
// float minus 1.5 * 2^23 is the sum converted exactly (|sum| < 2^22 for every
// type here), which is static_cast<float>(sum) without the slow I2F.
//
// Tiling: a block computes 64 activation rows x 64 weight rows with 8 warps
// (2 x 4, each 32 rows x 16 outputs: 2 x 2 MMAs, 16 outputs per thread, each
// with its class accumulator and 5 stack slots in registers). The block
// steps through units in class order, 8 units per shared-memory stage: the
// next stage's activations and raw weight blocks arrive by cp.async while the
// current stage is computed, then the weights are decoded by T::load_block
// (the matvec's own decoding) into int8 tiles; fragments come from shared
// memory by ldmatrix.
// A class has P steps, J = ceil(n_units / 32) rounded up to 1, 2, 4 or a
// multiple of 8, so that classes end at slots known at compile time (see
// Walk); steps with u >= n_units load nothing and add +0.0f (a no-op, see
// compute_slot).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/weight_units.cuh"
#include "core/error.h"

namespace muser::cuda {
namespace {

constexpr int kTileRows = 64;   // activation rows per block
constexpr int kTileOut = 64;    // weight rows (outputs) per block
constexpr int kStageUnits = 8;  // units per shared-memory stage
constexpr int kThreads = 256;   // 8 warps: 2 along rows x 4 along outputs
constexpr int kWarpRows = 32, kWarpOut = 16;
constexpr int kOutputs = 16;    // per thread: 2 (m16) x 2 (n8) x 4
static_assert(kTileRows % 32 == 0 && kTileOut % 32 == 0, "a warp stages whole rows of 32 lanes");

// 1.5 * 2^23: floats in [2^23, 2^24) are spaced 1 apart, so adding an int in
// (-2^22, 2^22) to these bits gives the float 1.5 * 2^23 + int exactly.
constexpr int kMagicBits = 0x4B400000;
constexpr float kMagic = 12582912.0f;

// A unit row (32 int8) is two 16-byte halves; row r keeps half h at
// position h ^ ((r / 4) % 2), so the 8 rows one ldmatrix phase reads hit
// all 32 banks once.
__device__ __forceinline__ int swizzled_half(int row, int half) { return half ^ ((row >> 2) & 1); }

// The 4-byte words of global memory that cover one weight block (blocks of
// 18, 22 and 34 bytes sit at 2-byte alignment): kRawWords of them, kept in
// shared memory at an odd word stride so that lanes on consecutive rows
// decode without bank conflicts.
template <typename T>
struct RawBlock {
  static constexpr int kWords = T::kBlockBytes % 4 == 0 ? T::kBlockBytes / 4 : (T::kBlockBytes + 2 + 3) / 4;
  static constexpr int kStride = kWords | 1;
};

// Shared memory of one block. Activations arrive by cp.async, double
// buffered (the next stage lands while this one is computed); weights arrive
// raw (cp.async of the covering words) and are decoded by T::load_block into
// `w` between stages, so `raw` and the decoded weights need one buffer each.
template <typename T>
struct Smem {
  static constexpr bool kHasMin = T::kHasMin;
  int4 a[2][kStageUnits][kTileRows][2];  // activation quants, 32 bytes per (unit, row), swizzled halves
  int4 w[kStageUnits][kTileOut][2];      // weight quants as T::load decodes them, swizzled halves
  float ad[2][kStageUnits][kTileRows];
  float as[2][kHasMin ? kStageUnits : 1][kTileRows];  // Q8_1 s (only with a weight min)
  float wd[kStageUnits][kTileOut];
  float wm[kHasMin ? kStageUnits : 1][kTileOut];
  uint32_t raw[kStageUnits][kTileOut][RawBlock<T>::kStride];
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// Asynchronous global -> shared copies of 4 and 16 bytes; bytes past
// src_bytes (0..size) are not read and land as zeros.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, unsigned src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, unsigned src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ int bitrev5(int i) { return static_cast<int>(__brev(static_cast<unsigned>(i)) >> 27); }

__host__ __device__ constexpr int trailing_ones(int i) { return (i & 1) ? 1 + trailing_ones(i >> 1) : 0; }

// Four 8x8 b16 matrices from shared memory: lane L gives the address of row
// L % 8 of matrix L / 8; register i of lane (g = L / 4, t = L % 4) receives
// 32-bit word t of row g of matrix i (4 consecutive int8 of that row).
__device__ __forceinline__ void ldmatrix_x4(int (&r)[4], const void* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A (16x32 s8, row) * B (32x8 s8, col) + c in every accumulator.
__device__ __forceinline__ void mma_s8(int (&d)[4], const int (&a)[4], int b0, int b1, int c) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c), "r"(c), "r"(c), "r"(c));
}

// Pushes the class partials acc as a leaf with `kLevel` trailing ones in its
// index onto the balanced tree: merges with the pending subtrees below
// kLevel, left sibling first, and leaves acc = 0 for the next class (or, at
// the last leaf, kLevel == 5, the tree's total).
template <int kLevel>
__device__ __forceinline__ void push_leaf(float (&acc)[kOutputs], float (&stack)[5][kOutputs]) {
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
    float v = acc[o];
#pragma unroll
    for (int lv = 0; lv < kLevel; ++lv) v = stack[lv][o] + v;
    if constexpr (kLevel < 5) {
      stack[kLevel][o] = v;
      acc[o] = 0.0f;
    } else {
      acc[o] = v;
    }
  }
}

// push_leaf for a level known only at run time (the same for the whole block).
__device__ __forceinline__ void push_leaf_at(int level, float (&acc)[kOutputs], float (&stack)[5][kOutputs]) {
  switch (level) {
    case 0: push_leaf<0>(acc, stack); break;
    case 1: push_leaf<1>(acc, stack); break;
    case 2: push_leaf<2>(acc, stack); break;
    case 3: push_leaf<3>(acc, stack); break;
    case 4: push_leaf<4>(acc, stack); break;
    default: push_leaf<5>(acc, stack); break;
  }
}

// The pipelined kernel's tree stack: levels 0 and 1 (written every 2nd and
// 4th class) in registers, levels 2..4 (every 8th class or rarer) in shared
// memory, each thread its own float4 columns, so that the 48 registers they
// took serve the math's pipelining instead. A level is always written
// before it is read (a leaf of class c merges level lv only if bit lv of c
// is set, and class c - 2^lv wrote it), so nothing needs clearing.
constexpr int kRegLevels = 2;
struct TreeStack {
  float reg[kRegLevels][kOutputs];
  float4* smem;  // level lv >= kRegLevels, outputs 4q..4q+3: smem[((lv - kRegLevels) * kOutputs / 4 + q) * kThreads]
  __device__ __forceinline__ float4& at(int lv, int q) const {
    return smem[((lv - kRegLevels) * (kOutputs / 4) + q) * kThreads];
  }
};

// push_leaf on a TreeStack.
template <int kLevel>
__device__ __forceinline__ void push_leaf(float (&acc)[kOutputs], TreeStack& stack) {
#pragma unroll
  for (int q = 0; q < kOutputs / 4; ++q) {
    float v[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) v[c] = acc[4 * q + c];
#pragma unroll
    for (int lv = 0; lv < kLevel; ++lv) {
      if (lv < kRegLevels) {
#pragma unroll
        for (int c = 0; c < 4; ++c) v[c] = stack.reg[lv < kRegLevels ? lv : 0][4 * q + c] + v[c];
      } else {
        const float4 left = stack.at(lv, q);
        v[0] = left.x + v[0];
        v[1] = left.y + v[1];
        v[2] = left.z + v[2];
        v[3] = left.w + v[3];
      }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[4 * q + c] = kLevel < 5 ? 0.0f : v[c];
    if constexpr (kLevel < kRegLevels) {
#pragma unroll
      for (int c = 0; c < 4; ++c) stack.reg[kLevel][4 * q + c] = v[c];
    } else if constexpr (kLevel < 5) {
      stack.at(kLevel, q) = make_float4(v[0], v[1], v[2], v[3]);
    }
  }
}

__device__ __forceinline__ void push_leaf_at(int level, float (&acc)[kOutputs], TreeStack& stack) {
  switch (level) {
    case 0: push_leaf<0>(acc, stack); break;
    case 1: push_leaf<1>(acc, stack); break;
    case 2: push_leaf<2>(acc, stack); break;
    case 3: push_leaf<3>(acc, stack); break;
    case 4: push_leaf<4>(acc, stack); break;
    default: push_leaf<5>(acc, stack); break;
  }
}

// The walk over (class, step) pairs. A class (lane l = bitrev5(class)) has
// P steps, units l + 32 j for j < P, with P = J = ceil(n_units / 32) rounded
// up to kP (1, 2 or 4) or to a multiple of 8 (kP == 8); steps with
// u >= n_units add +0.0f. kP < 8: a stage holds 8 / kP whole classes;
// kP == 8: a class spans `stages_per_class` whole stages. So every class
// ends at a slot known at compile time, and all but the stage's last class
// have their tree level known at compile time too.
template <int kP>
struct Walk {
  static constexpr int kClassesPerStage = kP < 8 ? kStageUnits / kP : 1;
  int stages_per_class;  // kP == 8 only
  __device__ __forceinline__ int n_stages() const {
    return kP < 8 ? 32 / kClassesPerStage : 32 * stages_per_class;
  }
  __device__ __forceinline__ int unit(int stage, int slot) const {
    if constexpr (kP < 8) {
      return bitrev5(stage * kClassesPerStage + slot / kP) + 32 * (slot % kP);
    } else {
      return bitrev5(stage / stages_per_class) + 32 * ((stage % stages_per_class) * kStageUnits + slot);
    }
  }
};

// Grid: (row tiles, output tiles); row tiles vary fastest, so the blocks
// that share a weight tile run together and read it from L2.
template <typename T, int kP>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_mma_kernel_v1(const uint8_t* __restrict__ w, size_t row_bytes, size_t n_out, int n_units,
                    int stages_per_class, ActivationView x, size_t n_rows, float* __restrict__ y, size_t ld_y) {
  constexpr bool kHasMin = T::kHasMin;
  constexpr int kRawWords = RawBlock<T>::kWords;
  dependent_launch_begin();  // before the first read of the activations (dependent_launch.cuh)
  extern __shared__ int4 smem_raw[];
  Smem<T>& sm = *reinterpret_cast<Smem<T>*>(smem_raw);
  const Walk<kP> walk{stages_per_class};

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row = (warp % 2) * kWarpRows, warp_out = (warp / 2) * kWarpOut;
  const size_t r0 = static_cast<size_t>(blockIdx.x) * kTileRows;
  const size_t n0 = static_cast<size_t>(blockIdx.y) * kTileOut;
  const size_t k = x.k, units_per_row = k / 32;
  const int n_stages = walk.n_stages();
  // Warps whose rows or outputs all lie past the matrix skip the math (the
  // block still loads and synchronizes together).
  const bool warp_active = r0 + warp_row < n_rows && n0 + warp_out < n_out;

  // Warp w stages slot w of every stage: the unit walk.unit(stage, w) of
  // all 64 rows of both operands, so a warp agrees on its unit and its lanes
  // take consecutive 16-byte activation halves and consecutive 4-byte words
  // of the raw weight blocks of consecutive rows (few lines per copy).
  static_assert(kThreads / 32 == kStageUnits, "one warp per slot");
  const int8_t* xq_tile = x.q + r0 * k;
  const uint8_t* w_tile = w + n0 * row_bytes;
  const unsigned k32 = static_cast<unsigned>(k), row_bytes32 = static_cast<unsigned>(row_bytes);
  const int my_slot = warp;

  // Issues the cp.async copies of this warp's slot of stage `stage`
  // (activations into buffer `buf`, raw weight words into sm.raw) and
  // commits them as one group. Units past n_units, rows past n_rows and
  // outputs past n_out copy nothing and read as zeros. Offsets inside the
  // block's tile are 32-bit (gemm_mma checks that 64 rows of either operand
  // fit).
  auto issue = [&](int stage, int buf) {
    const int u = walk.unit(stage, my_slot);
    const bool unit_ok = u < n_units;
#pragma unroll
    for (int j = 0; j < 2 * kTileRows / 32; ++j) {  // activation quants: (row, half) pairs
      const int row = lane / 2 + 16 * j, half = lane % 2;
      const bool ok = unit_ok && r0 + row < n_rows;
      const int8_t* src = ok ? xq_tile + (row * k32 + 32u * u + 16u * half) : x.q;
      cp_async16(&sm.a[buf][my_slot][row][swizzled_half(row, half)], src, ok ? 16u : 0u);
    }
#pragma unroll
    for (int j = 0; j < kTileRows / 32; ++j) {  // activation scales
      const int row = lane + 32 * j;
      const bool ok = unit_ok && r0 + row < n_rows;
      const size_t at = ok ? (r0 + row) * units_per_row + u : 0;
      cp_async4(&sm.ad[buf][my_slot][row], x.d + at, ok ? 4u : 0u);
      if constexpr (kHasMin) cp_async4(&sm.as[buf][my_slot][row], x.s + at, ok ? 4u : 0u);
    }
    const unsigned unit_at = T::kBlockBytes * static_cast<unsigned>(u);
#pragma unroll
    for (int j = 0; j < kTileOut * kRawWords / 32; ++j) {  // raw weight words: (row, word) pairs
      const int e = lane + 32 * j;
      const int row = e / kRawWords, word = e % kRawWords;
      const bool ok = unit_ok && n0 + row < n_out;
      // Covering words stay inside the matrix: it starts and (gemm_mma
      // checks) ends 4-byte aligned.
      const unsigned at = ((row * row_bytes32 + unit_at) & ~3u) + 4u * word;
      cp_async4(&sm.raw[my_slot][row][word], ok ? w_tile + at : w, ok ? 4u : 0u);
    }
    cp_async_commit();
  };
  static_assert(kTileOut * RawBlock<T>::kWords % 32 == 0, "whole warps of raw words");
  // Decodes the raw weights of this warp's slot of stage `stage` (landed in
  // sm.raw) into sm.w, sm.wd, sm.wm: T::load_block on the block inside its
  // covering words.
  auto decode = [&](int stage) {
    const int u = walk.unit(stage, my_slot);
    const unsigned unit_at = T::kBlockBytes * static_cast<unsigned>(u);
#pragma unroll
    for (int j = 0; j < kTileOut / 32; ++j) {
      const int row = lane + 32 * j;
      typename T::Unit unit;
      if (u < n_units && n0 + row < n_out) {
        const unsigned at = row * row_bytes32 + unit_at;
        T::load_block(reinterpret_cast<const uint8_t*>(sm.raw[my_slot][row]) + (at & 3u), unit);
      } else {
#pragma unroll
        for (int q = 0; q < 8; ++q) unit.q[q] = 0;
        unit.d = 0.0f;
        if constexpr (kHasMin) unit.m = 0.0f;
      }
      sm.w[my_slot][row][swizzled_half(row, 0)] = make_int4(unit.q[0], unit.q[1], unit.q[2], unit.q[3]);
      sm.w[my_slot][row][swizzled_half(row, 1)] = make_int4(unit.q[4], unit.q[5], unit.q[6], unit.q[7]);
      sm.wd[my_slot][row] = unit.d;
      if constexpr (kHasMin) sm.wm[my_slot][row] = unit.m;
    }
  };

  // ldmatrix row addresses of this lane (matrix L / 8, row L % 8): for the A
  // tile of m16 block mi, matrices (rows 0-7, half 0), (rows 8-15, half 0),
  // (rows 0-7, half 1), (rows 8-15, half 1) = the MMA's a0..a3; for the
  // warp's 16 weight rows, (rows 0-7, half 0), (rows 0-7, half 1), (rows
  // 8-15, half 0), (rows 8-15, half 1) = b0, b1 of n8 block 0, then of 1.
  const int mat = lane / 8, mat_row = lane % 8;
  int a_row[2], a_half[2];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
    a_row[mi] = warp_row + 16 * mi + mat_row + 8 * (mat & 1);
    a_half[mi] = swizzled_half(a_row[mi], mat >> 1);
  }
  const int b_row = warp_out + mat_row + 8 * (mat >> 1);
  const int b_half = swizzled_half(b_row, mat & 1);

  float acc[kOutputs], stack[5][kOutputs];
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
    acc[o] = 0.0f;
#pragma unroll
    for (int lv = 0; lv < 5; ++lv) stack[lv][o] = 0.0f;
  }

  // One slot of the stage: the unit's 4 MMAs and the float terms of the 16
  // outputs, then (kP < 8, a class ending here that is not the stage's
  // last) its push at a compile-time level. Slots of units past n_units hold
  // zero quants and scales (the copies' zero fill, decode's zeros), so their
  // terms are +0.0f, and acc + 0.0f is acc: acc starts at +0.0f and a
  // round-to-nearest sum is -0.0f only when both addends are, so acc is never
  // -0.0f. Computing them keeps the slots free of branches, so the compiler
  // overlaps one slot's ldmatrix and MMA latency with the next's.
  auto compute_slot = [&]<int kSlot>(int buf) {
    int a[2][4], b[4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) ldmatrix_x4(a[mi], &sm.a[buf][kSlot][a_row[mi]][a_half[mi]]);
    ldmatrix_x4(b, &sm.w[kSlot][b_row][b_half]);
    float ad[2][2], as[2][2], wd[2][2], wm[2][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_row + 16 * mi + g + 8 * h;
        ad[mi][h] = sm.ad[buf][kSlot][row];
        as[mi][h] = kHasMin ? sm.as[buf][kSlot][row] : 0.0f;
      }
    }
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) {
      const int col = warp_out + 8 * ni + 2 * t;
      const float2 d2 = *reinterpret_cast<const float2*>(&sm.wd[kSlot][col]);
      wd[ni][0] = d2.x;
      wd[ni][1] = d2.y;
      if constexpr (kHasMin) {
        const float2 m2 = *reinterpret_cast<const float2*>(&sm.wm[kSlot][col]);
        wm[ni][0] = m2.x;
        wm[ni][1] = m2.y;
      } else {
        wm[ni][0] = wm[ni][1] = 0.0f;
      }
    }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int ni = 0; ni < 2; ++ni) {
        int d[4];
        mma_s8(d, a[mi], b[2 * ni], b[2 * ni + 1], kMagicBits);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float sumf = __int_as_float(d[c]) - kMagic;
          const int o = (mi * 2 + ni) * 4 + c;
          acc[o] = acc[o] + T::scale_sum(sumf, wd[ni][c & 1], wm[ni][c & 1], ad[mi][c >> 1], as[mi][c >> 1]);
        }
      }
    }
    if constexpr (kP < 8) {
      constexpr int kClass = kSlot / kP;  // within the stage
      if constexpr (kSlot % kP == kP - 1 && kClass < Walk<kP>::kClassesPerStage - 1) {
        // The class index's low bits are kClass, not all ones: its trailing
        // ones are kClass's.
        push_leaf<trailing_ones(kClass)>(acc, stack);
      }
    }
  };
  auto compute_stage = [&]<int... kSlots>(std::integer_sequence<int, kSlots...>, int buf) {
    (compute_slot.template operator()<kSlots>(buf), ...);
  };

  issue(0, 0);
  cp_async_wait_all();
  __syncthreads();
  decode(0);
  __syncthreads();
  for (int s = 0; s < n_stages; ++s) {
    const bool more = s + 1 < n_stages;
    if (more) issue(s + 1, (s + 1) % 2);
    if (warp_active) compute_stage(std::make_integer_sequence<int, kStageUnits>{}, s % 2);
    // The stage's last class ends here (kP == 8: when this is its last stage).
    if (kP < 8 || s % walk.stages_per_class == walk.stages_per_class - 1) {
      const int cls = kP < 8 ? (s + 1) * Walk<kP>::kClassesPerStage - 1 : s / walk.stages_per_class;
      push_leaf_at(__ffs(~cls) - 1, acc, stack);
    }
    if (more) {
      // Every warp is done with sm.w and this stage's activations; the next
      // stage's copies have landed (each thread waits for its own, the
      // barrier for everyone's).
      cp_async_wait_all();
      __syncthreads();
      decode(s + 1);
      __syncthreads();
    }
  }

  // acc now holds each output's total (the last leaf merged every level).
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const size_t r = r0 + warp_row + 16 * mi + g + 8 * (c >> 1);
        const size_t n = n0 + warp_out + 8 * ni + 2 * t + (c & 1);
        if (r < n_rows && n < n_out) y[r * ld_y + n] = acc[(mi * 2 + ni) * 4 + c];
      }
    }
  }
}

template <typename T, int kP>
void launch_gemm_walk_v1(const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y, size_t ld_y,
                      int stages_per_class, cudaStream_t stream) {
  const size_t row_bytes = x.k / T::kBlockElems * T::kBlockBytes;
  const int n_units = static_cast<int>(x.k / 32);
  constexpr size_t kSmem = sizeof(Smem<T>);
  // Over the 48 KiB default: opt in once per instantiation (thread-safe
  // static initialization; the backend runs on device 0 only, and the
  // attribute belongs to the function, not to a stream).
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      gemm_mma_kernel_v1<T, kP>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
  check_cuda(opted_in, "cudaFuncSetAttribute(gemm_mma)");
  const dim3 grid(ceil_div(n_rows, kTileRows), ceil_div(n_out, kTileOut));
  launch_dependent(gemm_mma_kernel_v1<T, kP>, grid, dim3(kThreads), kSmem, stream, static_cast<const uint8_t*>(w),
                   row_bytes, n_out, n_units, stages_per_class, x, n_rows, y, ld_y);
  check_launch("gemm_mma");
}

// ---- The pipelined kernel -------------------------------------------------
//
// The same tiles, walk, decoding and float expression as gemm_mma_kernel_v1
// (so the same bits), with the shared-memory stages in a deeper pipeline:
// v1 issued stage s + 1's copies, computed stage s, waited for the copies,
// then decoded between two barriers, so every stage paid a round trip to L2
// or memory that one stage's math did not cover, the decode pass with the
// math of all warps stopped, and two barriers. Here the copies run kAhead
// stages ahead, and one barrier per stage separates stage s + 1's decode and
// stage s's math (done together, each warp at its own pace) from the copies
// that refill the buffers they free: at the top of iteration s
//   - stage s + 1's copies have landed (wait_group) and are visible to all
//     (the barrier), and every warp is done with iteration s - 1: its math
//     on activations (s - 1) and decoded weights (s - 1) % 2, and its decode
//     of the raw weights of stage s;
//   - so this iteration copies stage s + kAhead + 1 into the activation
//     buffer of stage s - 1 and the raw buffer of stage s, decodes stage s + 1
//     into the decoded buffer of stage s - 1, and computes stage s.
constexpr int kAhead = 2;                // stages in flight while one is computed
constexpr int kActBufs = kAhead + 2;     // computed, decoded next, in flight
constexpr int kRawBufs = kAhead + 1;     // decoded next, in flight

template <typename T>
struct PipeSmem {
  static constexpr bool kHasMin = T::kHasMin;
  int4 a[kActBufs][kStageUnits][kTileRows][2];
  float ad[kActBufs][kStageUnits][kTileRows];
  float as[kHasMin ? kActBufs : 1][kStageUnits][kTileRows];
  int4 w[2][kStageUnits][kTileOut][2];
  float wd[2][kStageUnits][kTileOut];
  float wm[kHasMin ? 2 : 1][kStageUnits][kTileOut];
  uint32_t raw[kRawBufs][kStageUnits][kTileOut][RawBlock<T>::kStride];
  float4 stack[5 - kRegLevels][kOutputs / 4][kThreads];  // TreeStack levels kRegLevels..4
};

// The raw weight copies of one warp's slot: lane L copies word L % kWords of
// row L / kWords + kRows * j (kRows whole rows per instruction), so the
// per-stage address is one add to a per-lane offset.
template <typename T>
struct RawCopy {
  static constexpr int kWords = RawBlock<T>::kWords;
  static constexpr int kRows = 32 / kWords;
  static constexpr int kCopies = (kTileOut + kRows - 1) / kRows;
};

template <int kN>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kN) : "memory");
}

template <typename T, int kP>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_mma_kernel(const uint8_t* __restrict__ w, size_t row_bytes, size_t n_out, int n_units, int stages_per_class,
                    ActivationView x, size_t n_rows, float* __restrict__ y, size_t ld_y) {
  constexpr bool kHasMin = T::kHasMin;
  using Copy = RawCopy<T>;
  dependent_launch_begin();  // before the first read of the activations (dependent_launch.cuh)
  extern __shared__ int4 smem_raw[];
  PipeSmem<T>& sm = *reinterpret_cast<PipeSmem<T>*>(smem_raw);
  const Walk<kP> walk{stages_per_class};

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row = (warp % 2) * kWarpRows, warp_out = (warp / 2) * kWarpOut;
  const size_t r0 = static_cast<size_t>(blockIdx.x) * kTileRows;
  const size_t n0 = static_cast<size_t>(blockIdx.y) * kTileOut;
  const size_t k = x.k, units_per_row = k / 32;
  const int n_stages = walk.n_stages();
  const bool warp_active = r0 + warp_row < n_rows && n0 + warp_out < n_out;
  // Rows of either operand inside the matrix (1..64).
  const int rows_in = n_rows - r0 < kTileRows ? static_cast<int>(n_rows - r0) : kTileRows;
  const int outs_in = n_out - n0 < kTileOut ? static_cast<int>(n_out - n0) : kTileOut;

  static_assert(kThreads / 32 == kStageUnits, "one warp per slot");
  const int my_slot = warp;
  // Per-lane parts of the copies, fixed for the whole walk (offsets inside
  // the block's tile are 32-bit: gemm_mma checks that 64 rows fit).
  const unsigned k32 = static_cast<unsigned>(k), row_bytes32 = static_cast<unsigned>(row_bytes);
  const int8_t* xq_tile = x.q + r0 * k;
  const uint8_t* w_tile = w + n0 * row_bytes;
  const int a_row = lane / 2, a_half_in = lane % 2;  // activation quants: row a_row + 16 j, half a_half_in
  const unsigned a_src = a_row * k32 + 16u * a_half_in;
  const int a_dst_half = swizzled_half(a_row, a_half_in);  // the same for a_row + 16 j
  const float* d_src = x.d + (r0 + lane) * units_per_row;  // activation scales: rows lane, lane + 32
  const float* s_src = kHasMin ? x.s + (r0 + lane) * units_per_row : nullptr;
  const int raw_row = lane / Copy::kWords, raw_word = lane % Copy::kWords;  // raw words
  const bool raw_lane = lane < Copy::kRows * Copy::kWords;
  const unsigned raw_src = raw_row * row_bytes32;

  // Copies this warp's slot of stage `stage` (activations and scales into
  // buffer stage % kActBufs, raw weight words into stage % kRawBufs) and
  // commits them as one group (an empty one past the last stage, so that
  // wait_group counts stages). Activations of units past n_units and rows
  // past n_rows land as zeros (a padding step's terms must be +0.0f, so its
  // scales must not be stale infinities); raw words of such units or of
  // outputs past n_out are not copied (decode writes zeros for them).
  auto issue = [&](int stage) {
    if (stage < n_stages) {
      const int u = walk.unit(stage, my_slot);
      const bool unit_ok = u < n_units;
      const int abuf = stage % kActBufs, rbuf = stage % kRawBufs;
      const unsigned unit_q = 32u * static_cast<unsigned>(u);
#pragma unroll
      for (int j = 0; j < 2 * kTileRows / 32; ++j) {
        const bool ok = unit_ok && a_row + 16 * j < rows_in;
        const int8_t* src = ok ? xq_tile + (a_src + 16u * k32 * j + unit_q) : x.q;
        cp_async16(&sm.a[abuf][my_slot][a_row + 16 * j][a_dst_half], src, ok ? 16u : 0u);
      }
#pragma unroll
      for (int j = 0; j < kTileRows / 32; ++j) {
        const bool ok = unit_ok && lane + 32 * j < rows_in;
        const size_t at = 32 * j * units_per_row + u;
        cp_async4(&sm.ad[abuf][my_slot][lane + 32 * j], ok ? d_src + at : x.d, ok ? 4u : 0u);
        if constexpr (kHasMin) cp_async4(&sm.as[abuf][my_slot][lane + 32 * j], ok ? s_src + at : x.s, ok ? 4u : 0u);
      }
      const unsigned unit_at = T::kBlockBytes * static_cast<unsigned>(u);
      if (unit_ok && raw_lane) {
#pragma unroll
        for (int j = 0; j < Copy::kCopies; ++j) {
          const int row = raw_row + Copy::kRows * j;
          if (row < outs_in) {
            // Covering words stay inside the matrix: it starts and (gemm_mma
            // checks) ends 4-byte aligned.
            const unsigned at = ((raw_src + Copy::kRows * j * row_bytes32 + unit_at) & ~3u) + 4u * raw_word;
            cp_async4(&sm.raw[rbuf][my_slot][row][raw_word], w_tile + at, 4u);
          }
        }
      }
    }
    cp_async_commit();
  };
  // Decodes the raw weights of this warp's slot of stage `stage` into the
  // decoded buffer stage % 2: T::load_block on the block inside its covering
  // words, zeros for units past n_units and outputs past n_out.
  auto decode = [&](int stage) {
    const int u = walk.unit(stage, my_slot);
    const int rbuf = stage % kRawBufs, wbuf = stage % 2;
    const unsigned unit_at = T::kBlockBytes * static_cast<unsigned>(u);
#pragma unroll
    for (int j = 0; j < kTileOut / 32; ++j) {
      const int row = lane + 32 * j;
      typename T::Unit unit;
      if (u < n_units && row < outs_in) {
        const unsigned at = row * row_bytes32 + unit_at;
        T::load_block(reinterpret_cast<const uint8_t*>(sm.raw[rbuf][my_slot][row]) + (at & 3u), unit);
      } else {
#pragma unroll
        for (int q = 0; q < 8; ++q) unit.q[q] = 0;
        unit.d = 0.0f;
        if constexpr (kHasMin) unit.m = 0.0f;
      }
      sm.w[wbuf][my_slot][row][swizzled_half(row, 0)] = make_int4(unit.q[0], unit.q[1], unit.q[2], unit.q[3]);
      sm.w[wbuf][my_slot][row][swizzled_half(row, 1)] = make_int4(unit.q[4], unit.q[5], unit.q[6], unit.q[7]);
      sm.wd[wbuf][my_slot][row] = unit.d;
      if constexpr (kHasMin) sm.wm[wbuf][my_slot][row] = unit.m;
    }
  };

  // ldmatrix row addresses of this lane, as in gemm_mma_kernel_v1.
  const int mat = lane / 8, mat_row = lane % 8;
  int a_ld_row[2], a_ld_half[2];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
    a_ld_row[mi] = warp_row + 16 * mi + mat_row + 8 * (mat & 1);
    a_ld_half[mi] = swizzled_half(a_ld_row[mi], mat >> 1);
  }
  const int b_row = warp_out + mat_row + 8 * (mat >> 1);
  const int b_half = swizzled_half(b_row, mat & 1);

  float acc[kOutputs];
  TreeStack stack;
  stack.smem = &sm.stack[0][0][tid];
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
    acc[o] = 0.0f;
#pragma unroll
    for (int lv = 0; lv < kRegLevels; ++lv) stack.reg[lv][o] = 0.0f;
  }

  // One slot of the stage, as compute_slot in gemm_mma_kernel_v1 (see there
  // for why padding slots are computed: their terms are +0.0f).
  auto compute_slot = [&]<int kSlot>(int abuf, int wbuf) {
    int a[2][4], b[4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) ldmatrix_x4(a[mi], &sm.a[abuf][kSlot][a_ld_row[mi]][a_ld_half[mi]]);
    ldmatrix_x4(b, &sm.w[wbuf][kSlot][b_row][b_half]);
    float ad[2][2], as[2][2], wd[2][2], wm[2][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_row + 16 * mi + g + 8 * h;
        ad[mi][h] = sm.ad[abuf][kSlot][row];
        as[mi][h] = kHasMin ? sm.as[kHasMin ? abuf : 0][kSlot][row] : 0.0f;
      }
    }
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) {
      const int col = warp_out + 8 * ni + 2 * t;
      const float2 d2 = *reinterpret_cast<const float2*>(&sm.wd[wbuf][kSlot][col]);
      wd[ni][0] = d2.x;
      wd[ni][1] = d2.y;
      if constexpr (kHasMin) {
        const float2 m2 = *reinterpret_cast<const float2*>(&sm.wm[wbuf][kSlot][col]);
        wm[ni][0] = m2.x;
        wm[ni][1] = m2.y;
      } else {
        wm[ni][0] = wm[ni][1] = 0.0f;
      }
    }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int ni = 0; ni < 2; ++ni) {
        int d[4];
        mma_s8(d, a[mi], b[2 * ni], b[2 * ni + 1], kMagicBits);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float sumf = __int_as_float(d[c]) - kMagic;
          const int o = (mi * 2 + ni) * 4 + c;
          acc[o] = acc[o] + T::scale_sum(sumf, wd[ni][c & 1], wm[ni][c & 1], ad[mi][c >> 1], as[mi][c >> 1]);
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
  auto compute_stage = [&]<int... kSlots>(std::integer_sequence<int, kSlots...>, int abuf, int wbuf) {
    (compute_slot.template operator()<kSlots>(abuf, wbuf), ...);
  };

#pragma unroll
  for (int i = 0; i <= kAhead; ++i) issue(i);
  cp_async_wait<kAhead>();  // stage 0 (this thread's copies)
  __syncthreads();
  decode(0);
  for (int s = 0; s < n_stages; ++s) {
    cp_async_wait<kAhead - 1>();  // stage s + 1
    __syncthreads();
    issue(s + kAhead + 1);
    if (s + 1 < n_stages) decode(s + 1);
    if (warp_active) compute_stage(std::make_integer_sequence<int, kStageUnits>{}, s % kActBufs, s % 2);
    // The stage's last class ends here (kP == 8: when this is its last stage).
    if (kP < 8 || s % walk.stages_per_class == walk.stages_per_class - 1) {
      const int cls = kP < 8 ? (s + 1) * Walk<kP>::kClassesPerStage - 1 : s / walk.stages_per_class;
      push_leaf_at(__ffs(~cls) - 1, acc, stack);
    }
  }

  // acc now holds each output's total (the last leaf merged every level).
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const size_t r = r0 + warp_row + 16 * mi + g + 8 * (c >> 1);
        const size_t n = n0 + warp_out + 8 * ni + 2 * t + (c & 1);
        if (r < n_rows && n < n_out) y[r * ld_y + n] = acc[(mi * 2 + ni) * 4 + c];
      }
    }
  }
}

template <typename T, int kP>
void launch_gemm_walk(const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y, size_t ld_y,
                      int stages_per_class, cudaStream_t stream) {
  const size_t row_bytes = x.k / T::kBlockElems * T::kBlockBytes;
  const int n_units = static_cast<int>(x.k / 32);
  constexpr size_t kSmem = sizeof(PipeSmem<T>);
  static_assert(kSmem <= 227 * 1024, "one block's shared memory on sm_90");
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      gemm_mma_kernel<T, kP>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
  check_cuda(opted_in, "cudaFuncSetAttribute(gemm_mma)");
  const dim3 grid(ceil_div(n_rows, kTileRows), ceil_div(n_out, kTileOut));
  launch_dependent(gemm_mma_kernel<T, kP>, grid, dim3(kThreads), kSmem, stream, static_cast<const uint8_t*>(w),
                   row_bytes, n_out, n_units, stages_per_class, x, n_rows, y, ld_y);
  check_launch("gemm_mma");
}

// Whether gemm_mma runs the unpipelined kernel of the first version
// (MUSER_CUDA_GEMM=v1, read once): for before/after measurements only; both
// give the same bits.
bool gemm_v1_requested() {
  static const bool v1 = [] {
    const char* env = std::getenv("MUSER_CUDA_GEMM");
    return env != nullptr && std::string(env) == "v1";
  }();
  return v1;
}

// Steps per class J = ceil(n_units / 32): 1, 2 and 3..4 get a walk of 1, 2
// and 4 steps per class, more a multiple of 8 (whole stages per class).
template <typename T>
void launch_gemm(const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y, size_t ld_y,
                 cudaStream_t stream) {
  const size_t per_class = (x.k / 32 + 31) / 32;
  const int kp = per_class <= 1 ? 1 : per_class <= 2 ? 2 : per_class <= 4 ? 4 : 8;
  const int stages_per_class = kp < 8 ? 1 : static_cast<int>((per_class + 7) / 8);
  auto walk = [&]<int kP>() {
    if (gemm_v1_requested()) {
      launch_gemm_walk_v1<T, kP>(w, n_out, x, n_rows, y, ld_y, stages_per_class, stream);
    } else {
      launch_gemm_walk<T, kP>(w, n_out, x, n_rows, y, ld_y, stages_per_class, stream);
    }
  };
  switch (kp) {
    case 1: walk.template operator()<1>(); break;
    case 2: walk.template operator()<2>(); break;
    case 4: walk.template operator()<4>(); break;
    default: walk.template operator()<8>(); break;
  }
}

}  // namespace

bool has_gemm_mma(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
      return true;
    default:
      return false;
  }
}

bool gemm_mma(DType type, const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y, size_t ld_y,
              void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (!has_gemm_mma(type)) return false;
  if (x.format != activation_format(type) || x.k % 32 != 0) {
    throw InternalError(std::string("[cuda gemm_mma] ") + dtype_info(type).name + " weights need " +
                        activation_format_name(activation_format(type)) + " activations of a 32-multiple length");
  }
  // The copies move whole 4-byte words of the weights and 16-byte halves of
  // activation blocks: the matrix must start and end 4-byte aligned (a slice
  // at an odd 2-byte offset, or an odd number of odd-length rows, is left to
  // the matvec tiles).
  const size_t row_bytes = x.k / dtype_info(type).block_elems * dtype_info(type).block_bytes;
  if (reinterpret_cast<uintptr_t>(w) % 4 != 0 || (n_out * row_bytes) % 4 != 0 ||
      reinterpret_cast<uintptr_t>(x.q) % 16 != 0) {
    return false;
  }
  // The kernel's offsets inside a 64-row tile of either operand are 32-bit.
  if (kTileRows * std::max(row_bytes, x.k) >= (size_t{1} << 32)) return false;
  if (n_rows == 0 || n_out == 0) return true;
  switch (type) {
    case DType::Q4_0: launch_gemm<TypeQ4_0>(w, n_out, x, n_rows, y, ld_y, stream); break;
    case DType::Q4_1: launch_gemm<TypeQ4_1>(w, n_out, x, n_rows, y, ld_y, stream); break;
    case DType::Q5_0: launch_gemm<TypeQ5_0>(w, n_out, x, n_rows, y, ld_y, stream); break;
    case DType::Q5_1: launch_gemm<TypeQ5_1>(w, n_out, x, n_rows, y, ld_y, stream); break;
    case DType::Q8_0: launch_gemm<TypeQ8_0>(w, n_out, x, n_rows, y, ld_y, stream); break;
    default: return false;
  }
  return true;
}

}  // namespace muser::cuda
