// The tensor-core prefill GEMM with its copies done by the Hopper tensor
// memory accelerator (TMA): the same tiles, warps, walk, decoding and float
// expression as ops_gemm_mma.cu's kernel (so the same bits; that file says
// why the walk is bitwise the matvec's), only the way each stage's data
// reaches shared memory differs.
//
// STATUS: opt-in (MUSER_CUDA_GEMM=tma). Its first device run (2026-12-02
// 06:24) died of an illegal instruction: its weight boxes started at each
// block's first byte, and a TMA box must start 16-byte aligned. This
// version starts them at the 16-byte boundary below the block (RawBox) and
// passed the GEMM tests on the H200 (08:50): q 4096x4096 at 512 rows 165 us,
// faster than v1 (194) and slower than the packed kernel
// (ops_gemm_mma_packed.cu, 111 us), the default for Q4_0.
//
// Why: the walk visits each output's units in class order, so one stage's 8
// units lie 32 units (1 KiB of activations, ~600 bytes of weights) apart in
// every row, and each (row, unit) pair costs a separate 32-byte sector. The
// cp.async copies of the other versions move those sectors through the SM's
// load/store path (a 4-byte activation scale per row and unit, 4-byte words
// of 18-byte weight blocks), and the three versions measured on the H200
// (the first, a pipelined one since removed, and ops_gemm_mma.cu's 16-warp
// kernel) all took the same ~3 us per stage whatever their warps and
// pipelining: bound, as far as we can tell, by that path. Here one TMA
// instruction per (slot, operand) moves a whole 64-row box, each starting
// 16-byte aligned in global memory: activations 64 x 32 bytes at byte 32 u
// (32-byte swizzle, which is the ldmatrix swizzle the kernels use),
// weights 64 x RawBox<T>::kBytes from the 16-byte boundary at or below the
// block, activation scales 64 x 4 floats (units u & ~3 .. +3; the kernel
// reads u & 3). Boxes past the matrix land as zeros (TMA's out-of-bounds
// fill), which the padding steps rely on as on the cp.async zero fill.
//
// Synchronization: one mbarrier per stage buffer counts the bytes of its 8
// slots' boxes (each slot's copies are issued by lane 0 of warp `slot`);
// everyone waits on it before reading the stage, and the one __syncthreads
// per stage keeps a buffer from being refilled before every warp is done
// with it (see the loop).
#include <cuda.h>  // CUtensorMap and the types of cuTensorMapEncodeTiled (found through the runtime)

#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm_mma_parts.cuh"

namespace muser::cuda::gemm {
namespace {

constexpr int kThreads = 512;  // 16 warps: 4 along rows x 4 along outputs
constexpr int kWarpRows = 16, kWarpOut = 16;
constexpr int kOutputs = 8;    // per thread: 2 (n8) x 4
constexpr int kBufs = 3;       // stage buffers: computed, decoded next, in flight
static_assert(kThreads / 32 == 2 * kStageUnits, "two warps decode each slot, 32 outputs each");
static_assert(kTileRows == 64 && kTileOut == 64, "the warp grid assumes 64 x 64");

// Tree levels 0..2 in registers, 3..4 in shared memory (the stage buffers
// take the room the other versions give to level 2).
using Stack = TreeStack<kOutputs, kThreads, 3>;

// ad_slot / wd_slot of ops_gemm_mma.cu: output n's weight scale at
// wd_slot(n), so that outputs 2t, 2t + 1, 8 + 2t, 9 + 2t of a warp's 16 are
// one float4.
__device__ __forceinline__ int wd_slot(int n) { return (n & ~15) + 4 * ((n >> 1) & 3) + 2 * ((n >> 3) & 1) + (n & 1); }

// A weight box row. A TMA box must start 16-byte aligned in global memory
// (the first device run of this kernel, which started each box at its
// block's first byte, 18 u bytes into the row, died of an illegal
// instruction), so the box of unit u starts at (kBlockBytes u) & ~15 and
// the block sits `offset(u)` bytes into it: up to 16 - gcd(kBlockBytes, 16)
// bytes, so the row is the block plus that much, rounded up to 16 bytes
// (32 for Q4_0, Q4_1, Q5_1; 48 for Q5_0, Q8_0). Unswizzled: the decode reads
// the block where it lies (T::load_block on shared memory, as the cp.async
// kernel does), at the cost of bank conflicts between the lanes' rows.
constexpr int gcd16(int n) { return (n & 15) == 0 ? 16 : (n & 7) == 0 ? 8 : (n & 3) == 0 ? 4 : (n & 1) == 0 ? 2 : 1; }
template <typename T>
struct RawBox {
  static constexpr int kBytes = (T::kBlockBytes + 16 - gcd16(T::kBlockBytes) + 15) / 16 * 16;
  static_assert(T::kBlockBytes % 2 == 0, "boxes of 2-byte elements");
  __host__ __device__ static constexpr int start(int u) { return (T::kBlockBytes * u) & ~15; }
  __host__ __device__ static constexpr int offset(int u) { return (T::kBlockBytes * u) & 15; }
};

// One stage's boxes, each 64 rows of one slot.
template <typename T>
struct alignas(1024) StageTiles {
  uint8_t a[kStageUnits][kTileRows][32];  // activation quants, 32-byte swizzle (= swizzled_half)
  uint8_t raw[kStageUnits][kTileOut][RawBox<T>::kBytes];
  float ad[kStageUnits][kTileRows][4];    // activation scales of units (u & ~3) .. + 3
  float as[T::kHasMin ? kStageUnits : 1][kTileRows][4];  // Q8_1 s (only with a weight min)
};

template <typename T>
struct alignas(1024) TmaSmem {
  StageTiles<T> stage[kBufs];
  int4 w[2][kStageUnits][kTileOut][2];  // weight quants as T::load decodes them, swizzled halves
  float wd[2][kStageUnits][kTileOut];   // at wd_slot(output)
  float wm[T::kHasMin ? 2 : 1][kStageUnits][kTileOut];
  float4 stack[Stack::kSmemFloat4s];
  uint64_t full[kBufs];  // mbarriers: stage buffer b's boxes have landed
};

// mbarrier and TMA primitives (PTX ISA 8.0, sm_90).
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra.uni WAIT;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// The box of `map` at element coordinates (c0, c1) into shared memory at
// dst; its bytes count against `bar`.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}

// Grid: (row tiles, output tiles); row tiles vary fastest, so the blocks
// that share a weight tile run together and read it from L2.
//
// The stage loop: at the top of iteration s, stage s + 1's boxes have
// landed (its mbarrier) and every warp is done with iteration s - 1 (the
// barrier): its math on the activations of stage s - 1 and the decoded
// weights of buffer (s - 1) % 2, its decode of stage s's raw weights. So
// iteration s loads stage s + 2 into the stage buffer of s - 1, decodes
// stage s + 1 into the decoded buffer of s - 1 and computes stage s.
template <typename T, int kP>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_tma_kernel(const __grid_constant__ CUtensorMap act_map, const __grid_constant__ CUtensorMap w_map,
                    const __grid_constant__ CUtensorMap d_map, const __grid_constant__ CUtensorMap s_map,
                    int n_units, int stages_per_class, size_t n_rows, size_t n_out, float* __restrict__ y,
                    size_t ld_y) {
  constexpr bool kHasMin = T::kHasMin;
  using Box = RawBox<T>;
  dependent_launch_begin();  // before the first read of the activations (dependent_launch.cuh)
  extern __shared__ uint8_t smem_bytes[];
  // The swizzle follows shared-memory address bits: align the tiles to 1 KiB
  // (the launch asks for that much more).
  // (An offset from smem_bytes, not a pointer rebuilt from an integer, so
  // that the compiler still knows the accesses are to shared memory.)
  TmaSmem<T>& sm = *reinterpret_cast<TmaSmem<T>*>(smem_bytes + ((1024 - (smem_addr(smem_bytes) & 1023)) & 1023));
  const Walk<kP> walk{stages_per_class};

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row = (warp % 4) * kWarpRows, warp_out = (warp / 4) * kWarpOut;
  const int r0 = static_cast<int>(blockIdx.x) * kTileRows;
  const int n0 = static_cast<int>(blockIdx.y) * kTileOut;
  const int n_stages = walk.n_stages();
  const bool warp_active = r0 + warp_row < static_cast<int>(n_rows) && n0 + warp_out < static_cast<int>(n_out);
  const int outs_in = static_cast<int>(n_out) - n0 < kTileOut ? static_cast<int>(n_out) - n0 : kTileOut;

  const int my_slot = warp % kStageUnits;
  const int dec_row = 32 * (warp / kStageUnits) + lane;  // decoded output of this lane
  const bool issuer = warp < kStageUnits && lane == 0;  // loads slot `warp` of every stage
  constexpr unsigned kSlotBytes = sizeof(StageTiles<T>::a[0]) + sizeof(StageTiles<T>::raw[0]) +
                                  sizeof(StageTiles<T>::ad[0]) + (kHasMin ? sizeof(StageTiles<T>::as[0]) : 0);

  if (tid == 0) {
    for (int b = 0; b < kBufs; ++b) mbar_init(&sm.full[b], kStageUnits);
    // The initialized barriers visible to the async proxy (the TMA unit).
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  // Loads this warp's slot of stage `stage` into stage buffer `buf` (issuer
  // lanes only; nothing past the last stage).
  auto issue = [&](int stage, int buf) {
    if (!issuer || stage >= n_stages) return;
    const int u = walk.unit(stage, my_slot);
    StageTiles<T>& tiles = sm.stage[buf];
    mbar_expect_bytes(&sm.full[buf], kSlotBytes);
    tma_load(tiles.a[my_slot], &act_map, 32 * u, r0, &sm.full[buf]);
    tma_load(tiles.raw[my_slot], &w_map, Box::start(u) / 2, n0, &sm.full[buf]);
    tma_load(tiles.ad[my_slot], &d_map, u & ~3, r0, &sm.full[buf]);
    if constexpr (kHasMin) tma_load(tiles.as[my_slot], &s_map, u & ~3, r0, &sm.full[buf]);
  };
  // Decodes this warp's 32 outputs of slot my_slot of stage `stage` (in
  // stage buffer `buf`) into the decoded buffer wbuf: T::load_block on the
  // block Box::offset(u) bytes into its box row, zeros for units past n_units and
  // outputs past n_out (their boxes hold TMA's zeros, which do not decode to
  // zero quants).
  auto decode = [&](int stage, int buf, int wbuf) {
    const int u = walk.unit(stage, my_slot);
    typename T::Unit unit;
    if (u < n_units && dec_row < outs_in) {
      T::load_block(sm.stage[buf].raw[my_slot][dec_row] + Box::offset(u), unit);
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

  // ldmatrix row addresses of this lane, as in ops_gemm_mma.cu: A from the
  // swizzled 32-byte activation rows, B from the decoded weights.
  const int mat = lane / 8, mat_row = lane % 8;
  const int a_ld_row = warp_row + mat_row + 8 * (mat & 1);
  const int a_ld_off = 16 * swizzled_half(a_ld_row, mat >> 1);
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

  // One slot of stage s, as compute_slot in ops_gemm_mma.cu (padding slots
  // hold zeros and add +0.0f); the activation scales are column u & 3 of
  // their box.
  auto compute_slot = [&]<int kSlot>(int s, int buf, int wbuf) {
    const StageTiles<T>& tiles = sm.stage[buf];
    const int e = walk.unit(s, kSlot) & 3;
    int a[4], b[4];
    ldmatrix_x4(a, &tiles.a[kSlot][a_ld_row][a_ld_off]);
    ldmatrix_x4(b, &sm.w[wbuf][kSlot][b_ld_row][b_ld_half]);
    const float ad_h[2] = {tiles.ad[kSlot][warp_row + g][e], tiles.ad[kSlot][warp_row + g + 8][e]};
    float as_h[2] = {0.0f, 0.0f};
    if constexpr (kHasMin) {
      as_h[0] = tiles.as[kSlot][warp_row + g][e];
      as_h[1] = tiles.as[kSlot][warp_row + g + 8][e];
    }
    const float4 wd = *reinterpret_cast<const float4*>(&sm.wd[wbuf][kSlot][warp_out + 4 * t]);
    float4 wm = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (kHasMin) wm = *reinterpret_cast<const float4*>(&sm.wm[wbuf][kSlot][warp_out + 4 * t]);
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
        push_leaf<trailing_ones(kClass)>(acc, stack);
      }
    }
  };
  auto compute_stage = [&]<int... kSlots>(std::integer_sequence<int, kSlots...>, int s, int buf, int wbuf) {
    (compute_slot.template operator()<kSlots>(s, buf, wbuf), ...);
  };

  issue(0, 0);
  issue(1, 1);
  mbar_wait(&sm.full[0], 0);
  decode(0, 0, 0);
  // Stage buffers of stages s - 1, s, s + 1: counted without divisions.
  static_assert(kBufs == 3, "the buffer counters below");
  int buf_prev = 2, buf_now = 0, buf_next = 1;
  for (int s = 0; s < n_stages; ++s) {
    if (s + 1 < n_stages) mbar_wait(&sm.full[buf_next], ((s + 1) / kBufs) & 1);
    __syncthreads();
    issue(s + 2, buf_prev);
    if (s + 1 < n_stages) decode(s + 1, buf_next, (s + 1) % 2);
    if (warp_active) compute_stage(std::make_integer_sequence<int, kStageUnits>{}, s, buf_now, s % 2);
    if (walk.ends_class(s)) {
      const int cls = walk.last_class(s);
      push_leaf_at(__ffs(~cls) - 1, acc, stack);
    }
    const int freed = buf_prev;
    buf_prev = buf_now;
    buf_now = buf_next;
    buf_next = freed;
  }

  // acc now holds each output's total (the last leaf merged every level).
#pragma unroll
  for (int ni = 0; ni < 2; ++ni) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const size_t r = static_cast<size_t>(r0 + warp_row + g + 8 * (c >> 1));
      const size_t n = static_cast<size_t>(n0 + warp_out + 8 * ni + 2 * t + (c & 1));
      if (r < n_rows && n < n_out) y[r * ld_y + n] = acc[ni * 4 + c];
    }
  }
}

// cuTensorMapEncodeTiled, looked up once through the runtime (no link
// against the driver library); null if the driver has none.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // clear the sticky-free error of the failed lookup
      return static_cast<EncodeTiled>(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// A 2-D map of `rows` rows of `cols` elements of `type` (`elem` bytes), rows
// `pitch` bytes apart, boxes of box_cols x box_rows; false if the driver
// refuses it.
bool make_map(CUtensorMap* map, CUtensorMapDataType type, const void* base, size_t cols, size_t rows, size_t pitch,
              unsigned box_cols, unsigned box_rows, CUtensorMapSwizzle swizzle) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {pitch};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename T>
bool launch_tma(const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y, size_t ld_y,
                cudaStream_t stream) {
  using Box = RawBox<T>;
  const size_t row_bytes = x.k / T::kBlockElems * T::kBlockBytes;
  const size_t n_units = x.k / 32;
  // TMA's needs: 16-byte aligned bases and row pitches (so whole rows of
  // weights and scales are multiples of 16 bytes), coordinates in int.
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned16(w) || row_bytes % 16 != 0 || !aligned16(x.q) || !aligned16(x.d) || (n_units * 4) % 16 != 0 ||
      (T::kHasMin && !aligned16(x.s)) || n_rows >= (size_t{1} << 31) || n_out >= (size_t{1} << 31) ||
      x.k >= (size_t{1} << 31)) {
    return false;
  }
  CUtensorMap act_map{}, w_map{}, d_map{}, s_map{};
  if (!make_map(&act_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, x.q, x.k, n_rows, x.k, 32, kTileRows,
                CU_TENSOR_MAP_SWIZZLE_32B) ||
      !make_map(&w_map, CU_TENSOR_MAP_DATA_TYPE_UINT16, w, row_bytes / 2, n_out, row_bytes, Box::kBytes / 2, kTileOut,
                CU_TENSOR_MAP_SWIZZLE_NONE) ||
      !make_map(&d_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, x.d, n_units, n_rows, n_units * 4, 4, kTileRows,
                CU_TENSOR_MAP_SWIZZLE_NONE)) {
    return false;
  }
  if (T::kHasMin) {
    if (!make_map(&s_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, x.s, n_units, n_rows, n_units * 4, 4, kTileRows,
                  CU_TENSOR_MAP_SWIZZLE_NONE)) {
      return false;
    }
  } else {
    s_map = d_map;  // unused
  }
  constexpr size_t kSmem = sizeof(TmaSmem<T>) + 1024;  // + the 1 KiB alignment
  static_assert(kSmem <= 227 * 1024, "one block's shared memory on sm_90");
  with_walk(x.k, [&]<int kP>(int stages_per_class) {
    // Over the 48 KiB default: opt in once per instantiation (see
    // ops_gemm_mma.cu).
    static const cudaError_t opted_in = cudaFuncSetAttribute(
        gemm_tma_kernel<T, kP>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
    check_cuda(opted_in, "cudaFuncSetAttribute(gemm_tma)");
    const dim3 grid(ceil_div(n_rows, kTileRows), ceil_div(n_out, kTileOut));
    launch_dependent(gemm_tma_kernel<T, kP>, grid, dim3(kThreads), kSmem, stream, act_map, w_map, d_map, s_map,
                     static_cast<int>(n_units), stages_per_class, n_rows, n_out, y, ld_y);
    check_launch("gemm_tma");
  });
  return true;
}

}  // namespace

bool launch_gemm_tma(DType type, const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y,
                     size_t ld_y, cudaStream_t stream) {
  bool launched = false;
  with_gemm_type(type, [&]<typename T>() { launched = launch_tma<T>(w, n_out, x, n_rows, y, ld_y, stream); });
  return launched;
}

}  // namespace muser::cuda::gemm
