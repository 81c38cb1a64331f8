// Quantized matrix times a few activation rows: one warp per weight row,
// each lane walking units u = lane, lane + 32, ... of that row, so every
// weight byte is read once for all rows of the tile. Per row, each lane sums
// its units' contributions in order and the warp combines the 32 partial
// sums in a fixed butterfly: the order depends only on the row length, so a
// row's result is bitwise the same for any tile size and position (batch and
// chunking invariance).
#include <string>

#include "backend/cuda/activation_rows.cuh"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/weight_units.cuh"
#include "core/env_switch.h"
#include "core/error.h"

namespace muser::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// Grid: (weight rows / (kWarpsPerBlock kOuts), row tiles). A warp takes
// kOuts consecutive weight rows (outputs), so each activation unit a lane
// loads serves all of them (the prefill tiles were bound by those loads:
// L1 98% busy for Q4_K at 512 rows, 2026-12-06); each output's terms, order
// and butterfly are the same whatever kOuts. A tile holds kRows rows (fewer
// in the last tile: rows past n_rows are skipped, never computed).
template <typename T, int kRows, int kOuts>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    matvec_kernel(const uint8_t* __restrict__ w, size_t row_bytes, size_t n_out, int n_units, ActivationView x,
                  size_t n_rows, float* __restrict__ y, size_t ld_y) {
  dependent_launch_begin();
  const size_t n0 = (static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * kOuts;
  const int lane = threadIdx.x % 32;
  if (n0 >= n_out) return;
  const size_t row0 = static_cast<size_t>(blockIdx.y) * kRows;
  // Outputs past n_out compute a copy of the last one and are never stored.
  const uint8_t* wrow[kOuts];
#pragma unroll
  for (int o = 0; o < kOuts; ++o) wrow[o] = w + (n0 + o < n_out ? n0 + o : n_out - 1) * row_bytes;
  ActRow act[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) act[r] = act_row(x, row0 + r < n_rows ? row0 + r : row0);
  float acc[kOuts][kRows];
#pragma unroll
  for (int o = 0; o < kOuts; ++o) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[o][r] = 0.0f;
  }
  for (int u = lane; u < n_units; u += 32) {
    typename T::Unit unit[kOuts];
#pragma unroll
    for (int o = 0; o < kOuts; ++o) T::load(wrow[o], u, unit[o]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row0 + r < n_rows) {
#pragma unroll
        for (int o = 0; o < kOuts; ++o) acc[o][r] = add_unit_term<T>(acc[o][r], unit[o], act[r], u);
      }
    }
  }
#pragma unroll
  for (int o = 0; o < kOuts; ++o) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float total = warp_sum(acc[o][r]);
      if (lane == 0 && row0 + r < n_rows && n0 + o < n_out) y[(row0 + r) * ld_y + n0 + o] = total;
    }
  }
}

// Outputs per warp of the prefill tiles: 4 by default. On an H200
// (2026-12-06), llama3-8b Q4_K pp512 with its matrices on these tiles (the
// GEMM off) ran 1,276 tok/s at 1 output per warp, 2,013 at 2, 2,451 at 4;
// the types without a GEMM take them at every prefill row count, the rest
// at 5..40 rows. MUSER_CUDA_PREFILL_OUTS=1 or 2 sets it for A/B runs (the
// same bits at any count). Read once.
int prefill_outs() {
  static const int outs = env_is("MUSER_CUDA_PREFILL_OUTS", "1") ? 1 : env_is("MUSER_CUDA_PREFILL_OUTS", "2") ? 2 : 4;
  return outs;
}

template <typename T, int kRows>
void launch_matvec(const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y, size_t ld_y,
                   cudaStream_t stream) {
  const size_t k = x.k;
  const size_t row_bytes = k / T::kBlockElems * T::kBlockBytes;
  const int n_units = static_cast<int>(k / 32);
  auto launch = [&]<int kOuts>() {
    const dim3 grid(ceil_div(n_out, kWarpsPerBlock * kOuts), ceil_div(n_rows, kRows));
    launch_dependent(matvec_kernel<T, kRows, kOuts>, grid, kWarpsPerBlock * 32, 0, stream,
                     static_cast<const uint8_t*>(w), row_bytes, n_out, n_units, x, n_rows, y, ld_y);
  };
  switch (prefill_outs()) {
    case 4: launch.template operator()<4>(); break;
    case 2: launch.template operator()<2>(); break;
    default: launch.template operator()<1>(); break;
  }
  check_launch("matvec");
}

// Activations in the format the weights need, rows of whole blocks.
void check_matvec_input(DType type, const ActivationView& x) {
  if (x.format != activation_format(type)) {
    throw InternalError(std::string("[cuda matvec] weights of type ") + dtype_info(type).name + " need " +
                        activation_format_name(activation_format(type)) + " activations, got " +
                        activation_format_name(x.format));
  }
  if (x.k % 32 != 0 || x.k % dtype_info(type).block_elems != 0) {
    throw InternalError("[cuda matvec] row length " + std::to_string(x.k) + " is not a block multiple");
  }
}

}  // namespace

void matvec(DType type, const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y,
            size_t ld_y, void* stream_ptr, const void* w_packed) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (n_rows == 0 || n_out == 0) return;
  check_matvec_input(type, x);
  // Decode groups (1..4 rows) have their own kernels (ops_matvec_decode.cu),
  // which compute every output as this one does; from kGemmMinRows rows the
  // tensor-core GEMM (ops_gemm_mma.cu) takes its types; the rest walk tiles
  // of kPrefillTileRows.
  if (n_rows <= 4) {
    const MatvecTarget target{w, n_out, y, ld_y, w_packed};
    matvec_decode_group(type, &target, 1, x, n_rows, stream_ptr);
    return;
  }
  if (n_rows >= kGemmMinRows && gemm_mma(type, w, n_out, x, n_rows, y, ld_y, stream, w_packed)) return;
  const bool ok = dispatch_type(type, [&]<typename T>() {
    launch_matvec<T, kPrefillTileRows>(w, n_out, x, n_rows, y, ld_y, stream);
  });
  if (!ok) throw InternalError(std::string("[cuda matvec] no kernel for type ") + dtype_info(type).name);
}

void matvec_targets(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                    void* stream) {
  if (count == 0 || count > kMaxDecodeTargets) {
    throw InternalError("[cuda matvec] " + std::to_string(count) + " targets (1.." +
                        std::to_string(kMaxDecodeTargets) + ")");
  }
  if (n_rows > 4 || count == 1) {
    // Prefill: one packed GEMM launch over all the targets where each takes
    // it (MUSER_CUDA_GEMM_TARGETS=0: one per target, for A/B runs; the same
    // bits either way).
    static const bool one_launch = !env_is("MUSER_CUDA_GEMM_TARGETS", "0");
    if (one_launch && count > 1 && n_rows >= kGemmMinRows &&
        gemm_mma_targets(type, targets, count, x, n_rows, stream)) {
      return;
    }
    for (size_t i = 0; i < count; ++i) {
      matvec(type, targets[i].w, targets[i].n_out, x, n_rows, targets[i].y, targets[i].ld_y, stream,
             targets[i].w_packed);
    }
    return;
  }
  if (n_rows == 0) return;
  check_matvec_input(type, x);
  matvec_decode_group(type, targets, count, x, n_rows, stream);
}

void matvec_decode_group(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x,
                         size_t n_rows, void* stream) {
  size_t n_out = 0;
  for (size_t i = 0; i < count; ++i) n_out += targets[i].n_out;
  if (decode_takes_mma(type, n_rows, n_out * x.k, false) &&
      matvec_decode_mma(type, targets, count, x, n_rows, 0, MmaWeights::kAny, stream)) {
    return;
  }
  matvec_decode(type, targets, count, x, n_rows, decode_config(type, n_out, n_rows), stream);
}

}  // namespace muser::cuda
