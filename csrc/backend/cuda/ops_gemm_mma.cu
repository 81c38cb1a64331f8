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
// does. Lanes without units give 0.0f leaves here too.
// tests/backend/test_cuda_gemm_order.py checks the tree equivalence on
// float32 in numpy; tests/cuda/test_cuda_ops.py checks the GEMM against the
// matvec bitwise.
//
// The int32 block sum of a unit is exact from the MMA: one k32 step is one
// 32-element unit, with the int8 weights as T::load decodes them. The MMA
// accumulator starts at 1.5 * 2^23 (as int bits), so its result read as a
// float minus 1.5 * 2^23 is the sum converted exactly (|sum| < 2^22 for every
// type here), which is static_cast<float>(sum) without the slow I2F.
//
// Tiling: a block computes 64 activation rows x 64 weight rows with 16
// warps (4 x 4, each 16 rows x 16 outputs: 2 MMAs per unit, 8 outputs per
// thread, each with its class accumulator and the tree stack's lower levels
// in registers, the upper ones in shared memory; at most 128 registers, so
// 16 warps fit an SM and hide each other's latencies). The block steps
// through units in class order, 8 units per shared-memory stage; the copies
// (cp.async: activations, their scales, the raw weight blocks) run kAhead
// stages ahead of the math; the weights are decoded by T::load_block (the
// matvec's own decoding) into int8 tiles one stage ahead; fragments come
// from shared memory by ldmatrix. One barrier per stage (see the loop).
// A class has P steps, J = ceil(n_units / 32) rounded up to 1, 2, 4 or a
// multiple of 8, so that classes end at slots known at compile time (see
// Walk); steps with u >= n_units load nothing and add +0.0f (a no-op, see
// compute_slot).
//
// Versions (requested_version): by default gemm_mma runs
// ops_gemm_mma_packed.cu's kernel for Q4_0 weights that have a packed copy
// (the backend makes one at upload; 1.8x v1 on the H200) and
// ops_gemm_mma_v1.cu's first version (8 warps, 16 outputs per thread, one
// stage of copies in flight, the decode between two barriers) for the
// other types. MUSER_CUDA_GEMM picks a version for every type: "v1" (no
// packed copies), this file's kernel ("v3") or ops_gemm_mma_tma.cu's
// ("tma": this kernel's tiles and math with the copies by the tensor memory
// accelerator; this file's kernel where TMA cannot take the matrix).
// gemm_mma_parts.cuh holds what the versions share.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm_mma_parts.cuh"
#include "core/error.h"

namespace muser::cuda {
namespace gemm {
namespace {

constexpr int kThreads = 512;  // 16 warps: 4 along rows x 4 along outputs
constexpr int kWarpRows = 16, kWarpOut = 16;
constexpr int kOutputs = 8;    // per thread: 2 (n8) x 4
constexpr int kAhead = 2;             // stages whose copies are in flight while one is computed
constexpr int kActBufs = kAhead + 2;  // activations: computed, decoded next, in flight
constexpr int kRawBufs = kAhead + 1;  // raw weights: decoded next, in flight
static_assert(kThreads / 32 == 2 * kStageUnits, "two warps stage each slot, 32 rows of either operand each");
static_assert(kTileRows == 64 && kTileOut == 64, "the warp grid and the staging assume 64 x 64");

using Stack = TreeStack<kOutputs, kThreads>;

// Scales sit in shared memory in the order one thread reads them together:
// activation row r (of 64) at ad_slot(r), so that rows g and g + 8 of a
// warp's 16 are one float2; output n at wd_slot(n), so that outputs 2t,
// 2t + 1, 8 + 2t, 9 + 2t of a warp's 16 are one float4.
__device__ __forceinline__ int ad_slot(int r) { return (r & ~15) + 2 * (r & 7) + ((r >> 3) & 1); }
__device__ __forceinline__ int wd_slot(int n) { return (n & ~15) + 4 * ((n >> 1) & 3) + 2 * ((n >> 3) & 1) + (n & 1); }

template <typename T>
struct Smem {
  static constexpr bool kHasMin = T::kHasMin;
  int4 a[kActBufs][kStageUnits][kTileRows][2];  // activation quants, 32 bytes per (unit, row), swizzled halves
  float ad[kActBufs][kStageUnits][kTileRows];   // at ad_slot(row)
  float as[kHasMin ? kActBufs : 1][kStageUnits][kTileRows];  // Q8_1 s (only with a weight min), at ad_slot
  int4 w[2][kStageUnits][kTileOut][2];          // weight quants as T::load decodes them, swizzled halves
  float wd[2][kStageUnits][kTileOut];           // at wd_slot(output)
  float wm[kHasMin ? 2 : 1][kStageUnits][kTileOut];
  uint32_t raw[kRawBufs][kStageUnits][kTileOut][RawBlock<T>::kStride];  // covering words of the weight blocks
  float4 stack[Stack::kSmemFloat4s];            // the tree levels Stack keeps in shared memory
};

// The raw weight copies of one warp (32 outputs of one slot): lane L copies
// word L % kWords of output L / kWords + kRows * j, kRows whole outputs per
// instruction, so the per-stage address is one add to a per-lane offset.
template <typename T>
struct RawCopy {
  static constexpr int kWords = RawBlock<T>::kWords;
  static constexpr int kRows = 32 / kWords;
  static constexpr int kCopies = (32 + kRows - 1) / kRows;
};

// Grid: (row tiles, output tiles); row tiles vary fastest, so the blocks
// that share a weight tile run together and read it from L2.
//
// The stage loop: at the top of iteration s, stage s + 1's copies have
// landed (wait_group) and are visible to all (the barrier), and every warp
// is done with iteration s - 1 (its math on the activations of stage s - 1
// and the decoded weights of buffer (s - 1) % 2, its decode of stage s's raw
// weights). So iteration s copies stage s + kAhead + 1 into the activation
// buffer of stage s - 1 and the raw buffer of stage s, decodes stage s + 1
// into the decoded buffer of stage s - 1 and computes stage s, each warp at
// its own pace until the next barrier.
template <typename T, int kP>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_mma_kernel(const uint8_t* __restrict__ w, size_t row_bytes, size_t n_out, int n_units, int stages_per_class,
                    ActivationView x, size_t n_rows, float* __restrict__ y, size_t ld_y) {
  constexpr bool kHasMin = T::kHasMin;
  using Copy = RawCopy<T>;
  dependent_launch_begin();  // before the first read of the activations (dependent_launch.cuh)
  extern __shared__ int4 smem_raw[];
  Smem<T>& sm = *reinterpret_cast<Smem<T>*>(smem_raw);
  const Walk<kP> walk{stages_per_class};

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row = (warp % 4) * kWarpRows, warp_out = (warp / 4) * kWarpOut;
  const size_t r0 = static_cast<size_t>(blockIdx.x) * kTileRows;
  const size_t n0 = static_cast<size_t>(blockIdx.y) * kTileOut;
  const size_t k = x.k, units_per_row = k / 32;
  const int n_stages = walk.n_stages();
  // Warps whose rows or outputs all lie past the matrix skip the math (the
  // block still loads and synchronizes together).
  const bool warp_active = r0 + warp_row < n_rows && n0 + warp_out < n_out;
  // Rows of either operand inside the matrix (1..64).
  const int rows_in = n_rows - r0 < kTileRows ? static_cast<int>(n_rows - r0) : kTileRows;
  const int outs_in = n_out - n0 < kTileOut ? static_cast<int>(n_out - n0) : kTileOut;

  // Warp w stages slot w % 8 of every stage, rows and outputs 32 * (w / 8)
  // .. + 31 of it: the unit walk.unit(stage, slot), so a warp agrees on its
  // unit and its lanes copy consecutive 16-byte activation halves and
  // consecutive 4-byte words of the raw blocks of consecutive outputs.
  // Per-lane parts of the copies are fixed for the whole walk (offsets
  // inside the block's tile are 32-bit: gemm_mma checks that 64 rows fit).
  const int my_slot = warp % kStageUnits, my_part = 32 * (warp / kStageUnits);
  const unsigned k32 = static_cast<unsigned>(k), row_bytes32 = static_cast<unsigned>(row_bytes);
  // Activation quants: rows a_row and a_row + 16, half a_half_in.
  const int a_row = my_part + lane / 2, a_half_in = lane % 2;
  const int8_t* a_src = opaque(x.q + r0 * k + (a_row * k32 + 16u * a_half_in));
  const unsigned a_step = opaque(16u * k32);
  const bool a_ok[2] = {a_row < rows_in, a_row + 16 < rows_in};
  const unsigned a_dst = smem_addr(&sm.a[0][my_slot][a_row][swizzled_half(a_row, a_half_in)]);
  // Activation scales: row s_row, at ad_slot(s_row).
  const int s_row = my_part + lane;
  const bool s_ok = s_row < rows_in;
  const float* d_src = opaque(s_ok ? x.d + (r0 + s_row) * units_per_row : x.d);
  const float* s_src = kHasMin ? opaque(s_ok ? x.s + (r0 + s_row) * units_per_row : x.s) : nullptr;
  const unsigned d_dst = smem_addr(&sm.ad[0][my_slot][ad_slot(s_row)]);
  const unsigned s_dst = smem_addr(&sm.as[0][my_slot][ad_slot(s_row)]);
  // Raw weight words: word raw_word of outputs raw_row + kRows * j, j <
  // raw_copies.
  const int raw_row = my_part + lane / Copy::kWords, raw_word = lane % Copy::kWords;
  const int raw_end = outs_in < my_part + 32 ? outs_in : my_part + 32;
  const int raw_copies = lane < Copy::kRows * Copy::kWords && raw_row < raw_end
                             ? (raw_end - raw_row + Copy::kRows - 1) / Copy::kRows
                             : 0;
  const uint8_t* raw_src = opaque(w + n0 * row_bytes + 4 * raw_word);
  const unsigned raw_at = opaque(raw_row * row_bytes32), raw_step = opaque(Copy::kRows * row_bytes32);
  const unsigned raw_dst = smem_addr(&sm.raw[0][my_slot][raw_row][raw_word]);
  constexpr unsigned kABuf = sizeof(sm.a[0]), kDBuf = sizeof(sm.ad[0]), kRawBuf = sizeof(sm.raw[0]);
  constexpr unsigned kRawStep = Copy::kRows * sizeof(sm.raw[0][0][0]);
  const int dec_row = my_part + lane;  // decoded output of this lane

  // Copies this warp's part of stage `stage` (activations and scales into
  // buffer abuf = stage % kActBufs, raw weight words into rbuf = stage %
  // kRawBufs) and commits them as one group (an empty one past the last
  // stage, so that wait_group counts stages). Activations of units past
  // n_units and rows past n_rows land as zeros (a padding step's terms must
  // be +0.0f, so its scales must not be stale infinities); raw words of such
  // units or of outputs past n_out are not copied (decode writes zeros for
  // them).
  auto issue = [&](int stage, int abuf, int rbuf) {
    if (stage < n_stages) {
      const int u = walk.unit(stage, my_slot);
      const bool unit_ok = u < n_units;
      const unsigned unit_q = 32u * static_cast<unsigned>(u);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const bool ok = unit_ok && a_ok[j];
        cp_async16_to(a_dst + abuf * kABuf + j * 16 * sizeof(sm.a[0][0][0]),
                      ok ? a_src + (j * a_step + unit_q) : x.q, ok ? 16u : 0u);
      }
      const bool d_ok = unit_ok && s_ok;
      cp_async4_to(d_dst + abuf * kDBuf, d_ok ? d_src + u : x.d, d_ok ? 4u : 0u);
      if constexpr (kHasMin) cp_async4_to(s_dst + abuf * kDBuf, d_ok ? s_src + u : x.s, d_ok ? 4u : 0u);
      if (unit_ok) {
        const unsigned unit_at = T::kBlockBytes * static_cast<unsigned>(u);
#pragma unroll
        for (int j = 0; j < Copy::kCopies; ++j) {
          if (j < raw_copies) {
            // Covering words stay inside the matrix: it starts and (gemm_mma
            // checks) ends 4-byte aligned.
            cp_async4_to(raw_dst + rbuf * kRawBuf + j * kRawStep, raw_src + ((raw_at + j * raw_step + unit_at) & ~3u),
                         4u);
          }
        }
      }
    }
    cp_async_commit();
  };
  // Decodes the raw weights of this warp's part of stage `stage` into the
  // decoded buffer stage % 2: T::load_block on the block inside its covering
  // words, zeros for units past n_units and outputs past n_out.
  auto decode = [&](int stage, int rbuf, int wbuf) {
    const int u = walk.unit(stage, my_slot);
    typename T::Unit unit;
    if (u < n_units && dec_row < outs_in) {
      const unsigned at = dec_row * row_bytes32 + T::kBlockBytes * static_cast<unsigned>(u);
      T::load_block(reinterpret_cast<const uint8_t*>(sm.raw[rbuf][my_slot][dec_row]) + (at & 3u), unit);
    } else {
#pragma unroll
      for (int q = 0; q < 8; ++q) unit.q[q] = 0;
      unit.d = 0.0f;
      if constexpr (kHasMin) unit.m = 0.0f;
    }
    sm.w[wbuf][my_slot][dec_row][swizzled_half(dec_row, 0)] = make_int4(unit.q[0], unit.q[1], unit.q[2], unit.q[3]);
    sm.w[wbuf][my_slot][dec_row][swizzled_half(dec_row, 1)] = make_int4(unit.q[4], unit.q[5], unit.q[6], unit.q[7]);
    sm.wd[wbuf][my_slot][wd_slot(dec_row)] = unit.d;
    if constexpr (kHasMin) sm.wm[wbuf][my_slot][wd_slot(dec_row)] = unit.m;
  };

  // ldmatrix row addresses of this lane (matrix L / 8, row L % 8): for the
  // warp's 16 activation rows, matrices (rows 0-7, half 0), (rows 8-15, half
  // 0), (rows 0-7, half 1), (rows 8-15, half 1) = the MMA's a0..a3; for its
  // 16 outputs, (rows 0-7, half 0), (rows 0-7, half 1), (rows 8-15, half 0),
  // (rows 8-15, half 1) = b0, b1 of n8 block 0, then of 1.
  const int mat = lane / 8, mat_row = lane % 8;
  const int a_ld_row = warp_row + mat_row + 8 * (mat & 1);
  const int a_ld_half = swizzled_half(a_ld_row, mat >> 1);
  const int b_ld_row = warp_out + mat_row + 8 * (mat >> 1);
  const int b_ld_half = swizzled_half(b_ld_row, mat & 1);

  float acc[kOutputs];
  Stack stack;
  stack.smem = &sm.stack[tid];
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
    acc[o] = 0.0f;
#pragma unroll
    for (int lv = 0; lv < Stack::kRegLevels; ++lv) stack.reg[lv][o] = 0.0f;
  }

  // One slot of the stage: the unit's 2 MMAs and the float terms of the 8
  // outputs, then (kP < 8, a class ending here that is not the stage's
  // last) its push at a compile-time level. Slots of units past n_units hold
  // zero quants and scales (the copies' zero fill, decode's zeros), so their
  // terms are +0.0f, and acc + 0.0f is acc: acc starts at +0.0f and a
  // round-to-nearest sum is -0.0f only when both addends are, so acc is never
  // -0.0f. Computing them keeps the slots free of branches, so the compiler
  // overlaps one slot's ldmatrix and MMA latency with the next's.
  auto compute_slot = [&]<int kSlot>(int abuf, int wbuf) {
    int a[4], b[4];
    ldmatrix_x4(a, &sm.a[abuf][kSlot][a_ld_row][a_ld_half]);
    ldmatrix_x4(b, &sm.w[wbuf][kSlot][b_ld_row][b_ld_half]);
    // ad[h]: row g + 8 h; wd[2 ni + c]: output 8 ni + 2 t + c (of the warp's).
    const float2 ad = *reinterpret_cast<const float2*>(&sm.ad[abuf][kSlot][warp_row + 2 * g]);
    const float4 wd = *reinterpret_cast<const float4*>(&sm.wd[wbuf][kSlot][warp_out + 4 * t]);
    float2 as = make_float2(0.0f, 0.0f);
    float4 wm = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (kHasMin) {
      as = *reinterpret_cast<const float2*>(&sm.as[abuf][kSlot][warp_row + 2 * g]);
      wm = *reinterpret_cast<const float4*>(&sm.wm[wbuf][kSlot][warp_out + 4 * t]);
    }
    const float ad_h[2] = {ad.x, ad.y}, as_h[2] = {as.x, as.y};
    const float wd_c[4] = {wd.x, wd.y, wd.z, wd.w}, wm_c[4] = {wm.x, wm.y, wm.z, wm.w};
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) {
      int d[4];
      mma_s8(d, a, b[2 * ni], b[2 * ni + 1], kMagicBits);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float sumf = __int_as_float(d[c]) - kMagic;
        const int o = ni * 4 + c;
        acc[o] = acc[o] + T::scale_sum(sumf, wd_c[2 * ni + (c & 1)], wm_c[2 * ni + (c & 1)], ad_h[c >> 1],
                                       as_h[c >> 1]);
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
  auto compute_stage = [&]<int... kSlots>(std::integer_sequence<int, kSlots...>, int abuf, int wbuf) {
    (compute_slot.template operator()<kSlots>(abuf, wbuf), ...);
  };

#pragma unroll
  for (int i = 0; i <= kAhead; ++i) issue(i, i, i);
  cp_async_wait<kAhead>();  // stage 0 (this thread's copies)
  __syncthreads();
  decode(0, 0, 0);
  // Raw buffer of stage s + 1 (decoded now) and of stage s + kAhead + 1 =
  // s + 3 (copied now): (s + 1) % 3 and s % 3, counted without divisions.
  static_assert(kRawBufs == 3 && kActBufs == 4, "the buffer counters below");
  int raw_now = 0, raw_next = 1;
  for (int s = 0; s < n_stages; ++s) {
    cp_async_wait<kAhead - 1>();  // stage s + 1
    __syncthreads();
    issue(s + kAhead + 1, (s + kAhead + 1) % kActBufs, raw_now);
    if (s + 1 < n_stages) decode(s + 1, raw_next, (s + 1) % 2);
    raw_now = raw_next;
    raw_next = raw_next == kRawBufs - 1 ? 0 : raw_next + 1;
    if (warp_active) compute_stage(std::make_integer_sequence<int, kStageUnits>{}, s % kActBufs, s % 2);
    // The stage's last class ends here (kP == 8: when this is its last stage).
    if (walk.ends_class(s)) {
      const int cls = walk.last_class(s);
      push_leaf_at(__ffs(~cls) - 1, acc, stack);
    }
  }

  // acc now holds each output's total (the last leaf merged every level).
#pragma unroll
  for (int ni = 0; ni < 2; ++ni) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const size_t r = r0 + warp_row + g + 8 * (c >> 1);
      const size_t n = n0 + warp_out + 8 * ni + 2 * t + (c & 1);
      if (r < n_rows && n < n_out) y[r * ld_y + n] = acc[ni * 4 + c];
    }
  }
}

template <typename T, int kP>
void launch_gemm_walk(const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y, size_t ld_y,
                      int stages_per_class, cudaStream_t stream) {
  const size_t row_bytes = x.k / T::kBlockElems * T::kBlockBytes;
  const int n_units = static_cast<int>(x.k / 32);
  constexpr size_t kSmem = sizeof(Smem<T>);
  static_assert(kSmem <= 227 * 1024, "one block's shared memory on sm_90");
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

// The kernel version gemm_mma runs (MUSER_CUDA_GEMM, read once; all
// compute the same bits, all ran bitwise-clean on the H200 on 2026-12-02):
// by default ("packed", or unset) the kernel of ops_gemm_mma_packed.cu for
// Q4_0 weights with a packed copy and the first version
// (ops_gemm_mma_v1.cu) for the rest (q 4096x4096 at 512 rows: 111 us vs
// v1's 194); "v1" the first version for every type, with no packed copies
// (the way back); "v3" this file's kernel (as fast as v1); "tma" the kernel
// of ops_gemm_mma_tma.cu (165 us; this file's kernel where TMA cannot take
// the matrix).
constexpr int kPackedVersion = 5;
int requested_version() {
  static const int version = [] {
    const char* env = std::getenv("MUSER_CUDA_GEMM");
    const std::string v = env != nullptr ? env : "";
    return v == "v1" ? 1 : v == "v3" ? 3 : v == "tma" ? 4 : kPackedVersion;
  }();
  return version;
}

}  // namespace
}  // namespace gemm

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

bool gemm_packs(DType type) { return type == DType::Q4_0 && gemm::requested_version() == gemm::kPackedVersion; }

size_t gemm_packed_weight_bytes(DType type, size_t n_out, size_t k) {
  return gemm_packs(type) ? gemm::packed_weight_bytes(n_out, k) : 0;
}

void gemm_pack_weights(DType type, const void* w, size_t n_out, size_t k, void* dst, void* stream) {
  if (!gemm_packs(type)) {
    throw InternalError(std::string("[cuda gemm_pack_weights] the GEMM packs no ") + dtype_info(type).name);
  }
  gemm::pack_weights_q4_0(w, n_out, k, dst, static_cast<cudaStream_t>(stream));
}

size_t gemm_activation_pack_bytes(ActivationFormat format, size_t n_rows, size_t k) {
  if (format != activation_format(DType::Q4_0) || n_rows < kGemmMinRows || !gemm_packs(DType::Q4_0)) return 0;
  return gemm::packed_activation_bytes(n_rows, k);
}

bool gemm_mma(DType type, const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y, size_t ld_y,
              void* stream_ptr, const void* w_packed) {
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
  // The kernels' offsets inside a 64-row tile of either operand are 32-bit.
  if (gemm::kTileRows * std::max(row_bytes, x.k) >= (size_t{1} << 32)) return false;
  if (n_rows == 0 || n_out == 0) return true;
  const int version = gemm::requested_version();
  // The packed operands: the weights' copy from gemm_pack_weights, room for
  // the activations' in the view (sized for at least n_rows rows).
  if (w_packed != nullptr && x.gemm_pack != nullptr && gemm_packs(type)) {
    gemm::launch_gemm_packed(w_packed, n_out, x, n_rows, y, ld_y, stream);
    return true;
  }
  if (version == 4 && gemm::launch_gemm_tma(type, w, n_out, x, n_rows, y, ld_y, stream)) return true;
  switch (version) {
    case 1:
    case gemm::kPackedVersion: gemm::launch_gemm_v1(type, w, n_out, x, n_rows, y, ld_y, stream); break;
    default:  // 3, and 4 where TMA cannot take the matrix
      gemm::with_gemm_type(type, [&]<typename T>() {
        gemm::with_walk(x.k, [&]<int kP>(int stages_per_class) {
          gemm::launch_gemm_walk<T, kP>(w, n_out, x, n_rows, y, ld_y, stages_per_class, stream);
        });
      });
  }
  return true;
}

}  // namespace muser::cuda
