// The second version of the tensor-core prefill GEMM (ops_gemm_mma.cu says
// why its walk is bitwise the matvec's), kept so that MUSER_CUDA_GEMM=v2
// measures the later versions against it.
//
// The same tiles, walk, decoding and float expression as the first version
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
#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm_mma_parts.cuh"

namespace muser::cuda::gemm {
namespace {

constexpr int kThreads = 256;  // 8 warps: 2 along rows x 4 along outputs
constexpr int kWarpRows = 32, kWarpOut = 16;
constexpr int kOutputs = 16;   // per thread: 2 (m16) x 2 (n8) x 4

constexpr int kAhead = 2;                // stages in flight while one is computed
constexpr int kActBufs = kAhead + 2;     // computed, decoded next, in flight
constexpr int kRawBufs = kAhead + 1;     // decoded next, in flight

using Stack = TreeStack<kOutputs, kThreads>;

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
  float4 stack[Stack::kSmemFloat4s];  // the tree levels Stack keeps in shared memory
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

  // ldmatrix row addresses of this lane, as in the first version's kernel (ops_gemm_mma_v1.cu).
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
  Stack stack;
  stack.smem = &sm.stack[tid];
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
    acc[o] = 0.0f;
#pragma unroll
    for (int lv = 0; lv < Stack::kRegLevels; ++lv) stack.reg[lv][o] = 0.0f;
  }

  // One slot of the stage, as compute_slot in the first version's kernel (ops_gemm_mma_v1.cu) (see there
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
}  // namespace

void launch_gemm_v2(DType type, const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y,
                    size_t ld_y, cudaStream_t stream) {
  with_gemm_type(type, [&]<typename T>() {
    with_walk(x.k, [&]<int kP>(int stages_per_class) {
      launch_gemm_walk<T, kP>(w, n_out, x, n_rows, y, ld_y, stages_per_class, stream);
    });
  });
}

}  // namespace muser::cuda::gemm
