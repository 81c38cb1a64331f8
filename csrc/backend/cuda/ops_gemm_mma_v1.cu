// The first version of the tensor-core prefill GEMM (ops_gemm_mma.cu says
// why its walk is bitwise the matvec's): the default for the types the
// packed kernel (ops_gemm_mma_packed.cu) does not take, and for every type
// under MUSER_CUDA_GEMM=v1 (the way back). 8 warps per 64 x 64 tile, each
// 32 rows x 16 outputs (16 outputs per thread with a 5-level register tree
// stack, 255 registers), 8 units per stage, the next stage's copies in flight
// while one is computed, the weights decoded between two barriers.
#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm_mma_parts.cuh"

namespace muser::cuda::gemm {
namespace {

static_assert(kTileRows % 32 == 0 && kTileOut % 32 == 0, "a warp stages whole rows of 32 lanes");

// Shared memory of one block. Activations arrive by cp.async, double
// buffered (the next stage lands while this one is computed); weights arrive
// raw (cp.async of the covering words) and are decoded by T::load_block into
// `w` between stages, so `raw` and the decoded weights need one buffer each.
//
// The K-quants (kSuper, Q4_K): a unit is a 32-element sub-block of a
// 256-element super-block; its weights bring d sc and d_min mn (wd, wm: the
// super-block's scales times the sub-block's 6-bit scale and min, exact),
// its activations the Q8_K row's d of the super-block (ad) and the two
// 16-element sums of the unit (bs).
template <typename T>
constexpr bool kSuper = T::kBlockElems == 256;
template <typename T, bool = kSuper<T>>
struct Q8_1Min : std::bool_constant<T::kHasMin> {};
template <typename T>
struct Q8_1Min<T, true> : std::false_type {};
template <typename T>
struct Smem {
  static constexpr bool kHasMin = Q8_1Min<T>::value;
  static constexpr bool kWm = kHasMin || kSuper<T>;
  int4 a[2][kStageUnits][kTileRows][2];  // activation quants, 32 bytes per (unit, row), swizzled halves
  int4 w[kStageUnits][kTileOut][2];      // weight quants as T::load decodes them, swizzled halves
  float ad[2][kStageUnits][kTileRows];
  float as[2][kHasMin ? kStageUnits : 1][kTileRows];  // Q8_1 s (only with a weight min)
  int2 bs[2][kSuper<T> ? kStageUnits : 1][kTileRows];  // Q8_K: the unit's two 16-element sums
  float wd[kStageUnits][kTileOut];
  float wm[kWm ? kStageUnits : 1][kTileOut];
  uint32_t raw[kStageUnits][kTileOut][RawBlock<T>::kStride];
};

// Grid: (row tiles, output tiles); row tiles vary fastest, so the blocks
// that share a weight tile run together and read it from L2.
template <typename T, int kP>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_mma_kernel(const uint8_t* __restrict__ w, size_t row_bytes, size_t n_out, int n_units,
                    int stages_per_class, ActivationView x, size_t n_rows, float* __restrict__ y, size_t ld_y) {
  constexpr bool kHasMin = Q8_1Min<T>::value, kK = kSuper<T>, kWm = Smem<T>::kWm;
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
      if constexpr (kK) {
        // Q8_K: one d per super-block, a sum per 16 elements.
        const size_t at = ok ? (r0 + row) * (k / 256) + u / 8 : 0;
        const size_t bs_at = ok ? (r0 + row) * (k / 16) + 2 * static_cast<size_t>(u) : 0;
        cp_async4(&sm.ad[buf][my_slot][row], x.d + at, ok ? 4u : 0u);
        cp_async4(&sm.bs[buf][my_slot][row].x, x.bsum + bs_at, ok ? 4u : 0u);
        cp_async4(&sm.bs[buf][my_slot][row].y, x.bsum + bs_at + 1, ok ? 4u : 0u);
      } else {
        const size_t at = ok ? (r0 + row) * units_per_row + u : 0;
        cp_async4(&sm.ad[buf][my_slot][row], x.d + at, ok ? 4u : 0u);
        if constexpr (kHasMin) cp_async4(&sm.as[buf][my_slot][row], x.s + at, ok ? 4u : 0u);
      }
    }
    const unsigned unit_at = kK ? T::kBlockBytes * static_cast<unsigned>(u / 8) : T::kBlockBytes * static_cast<unsigned>(u);
#pragma unroll
    for (int j = 0; j < kTileOut * kRawWords / 32; ++j) {  // raw weight words: (row, word) pairs
      const int e = lane + 32 * j;
      const int row = e / kRawWords, word = e % kRawWords;
      const bool ok = unit_ok && n0 + row < n_out;
      // Covering words stay inside the matrix: it starts and (gemm_mma
      // checks) ends 4-byte aligned. K-quants: the super-block's d, dmin and
      // scales (words 0..3), then the 8 words of the sub-block's quant bytes.
      unsigned at;
      if constexpr (kK) {
        at = row * row_bytes32 + unit_at + RawBlock<T>::word_offset(word, u % 8);
      } else {
        at = ((row * row_bytes32 + unit_at) & ~3u) + 4u * word;
      }
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
      const bool ok = u < n_units && n0 + row < n_out;
      if constexpr (kK) {
        if (ok) {
          T::load_raw(sm.raw[my_slot][row], u % 8, unit);
        } else {
#pragma unroll
          for (int q = 0; q < 8; ++q) unit.q[q] = 0;
          unit.sc = unit.mn = 0;
          unit.d = unit.dmin = 0.0f;
        }
        unit.d = __fmul_rn(unit.d, static_cast<float>(unit.sc));  // d sc and d_min mn: exact
        sm.wm[my_slot][row] = __fmul_rn(unit.dmin, static_cast<float>(unit.mn));
      } else {
        if (ok) {
          const unsigned at = row * row_bytes32 + unit_at;
          T::load_block(reinterpret_cast<const uint8_t*>(sm.raw[my_slot][row]) + (at & 3u), unit);
        } else {
#pragma unroll
          for (int q = 0; q < 8; ++q) unit.q[q] = 0;
          unit.d = 0.0f;
          if constexpr (kHasMin) unit.m = 0.0f;
        }
        if constexpr (kHasMin) sm.wm[my_slot][row] = unit.m;
      }
      sm.w[my_slot][row][swizzled_half(row, 0)] = make_int4(unit.q[0], unit.q[1], unit.q[2], unit.q[3]);
      sm.w[my_slot][row][swizzled_half(row, 1)] = make_int4(unit.q[4], unit.q[5], unit.q[6], unit.q[7]);
      sm.wd[my_slot][row] = unit.d;
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
  clear_tree(acc, stack);

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
    [[maybe_unused]] float bs[2][2];  // K-quants: a row's 32-element sum
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_row + 16 * mi + g + 8 * h;
        ad[mi][h] = sm.ad[buf][kSlot][row];
        as[mi][h] = kHasMin ? sm.as[buf][kSlot][row] : 0.0f;
        if constexpr (kK) {
          const int2 pair = sm.bs[buf][kSlot][row];
          bs[mi][h] = static_cast<float>(pair.x + pair.y);
        }
      }
    }
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) {
      const int col = warp_out + 8 * ni + 2 * t;
      const float2 d2 = *reinterpret_cast<const float2*>(&sm.wd[kSlot][col]);
      wd[ni][0] = d2.x;
      wd[ni][1] = d2.y;
      if constexpr (kWm) {
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
        if constexpr (kK) {
          // The unit's integer sum from the magic start (|isum| <= 32 * 15
          // * 127), then TypeQ4_K::add_scaled's term (q4_k_magic_term).
          mma_s8(d, a[mi], b[2 * ni], b[2 * ni + 1], kMagicBits);
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int o = (mi * 2 + ni) * 4 + c;
            acc[o] = q4_k_magic_term(acc[o], d[c], q4_k_scale(wd[ni][c & 1], wm[ni][c & 1]), bs[mi][c >> 1],
                                     ad[mi][c >> 1]);
          }
        } else {
          mma_s8(d, a[mi], b[2 * ni], b[2 * ni + 1], kMagicBits);
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const float sumf = __int_as_float(d[c]) - kMagic;
            const int o = (mi * 2 + ni) * 4 + c;
            acc[o] = T::add_scaled(acc[o], sumf, wd[ni][c & 1], wm[ni][c & 1], ad[mi][c >> 1], as[mi][c >> 1]);
          }
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
  cp_async_wait<0>();
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
      cp_async_wait<0>();
      __syncthreads();
      decode(s + 1);
      __syncthreads();
    }
  }

  // acc now holds each output's total (the last leaf merged every level).
  store_warp_outputs(acc, r0 + warp_row, n0 + warp_out, g, t, n_rows, n_out, y, ld_y);
}

template <typename T, int kP>
void launch_gemm_walk(const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y, size_t ld_y,
                      int stages_per_class, cudaStream_t stream) {
  const size_t row_bytes = x.k / T::kBlockElems * T::kBlockBytes;
  const int n_units = static_cast<int>(x.k / 32);
  constexpr size_t kSmem = sizeof(Smem<T>);
  // Over the 48 KiB default: opt in once per instantiation (thread-safe
  // static initialization; the backend runs on device 0 only, and the
  // attribute belongs to the function, not to a stream).
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      gemm_mma_kernel<T, kP>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
  check_cuda(opted_in, "cudaFuncSetAttribute(gemm_mma)");
  const dim3 grid(ceil_div(n_rows, kTileRows), ceil_div(n_out, kTileOut));
  launch_dependent(gemm_mma_kernel<T, kP>, grid, dim3(kThreads), kSmem, stream, static_cast<const uint8_t*>(w),
                   row_bytes, n_out, n_units, stages_per_class, x, n_rows, y, ld_y);
  check_launch("gemm_mma");
}


}  // namespace

void launch_gemm_v1(DType type, const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y,
                    size_t ld_y, cudaStream_t stream) {
  with_gemm_type(type, [&]<typename T>() {
    with_walk(x.k, [&]<int kP>(int stages_per_class) {
      launch_gemm_walk<T, kP>(w, n_out, x, n_rows, y, ld_y, stages_per_class, stream);
    });
  });
}

}  // namespace muser::cuda::gemm
