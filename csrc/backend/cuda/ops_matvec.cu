// Quantized matrix times a few activation rows: one warp per weight row,
// each lane walking units u = lane, lane + 32, ... of that row, so every
// weight byte is read once for all rows of the tile. Per row, each lane sums
// its units' contributions in order and the warp combines the 32 partial
// sums in a fixed butterfly: the order depends only on the row length, so a
// row's result is bitwise the same for any tile size and position (batch and
// chunking invariance).
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/weight_units.cuh"
#include "core/error.h"

namespace muser::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ ActRow act_row(const ActivationView& x, size_t r) {
  ActRow a;
  const size_t k = x.k;
  a.q = x.q != nullptr ? reinterpret_cast<const int*>(x.q + r * k) : nullptr;
  a.f = x.f != nullptr ? x.f + r * k : nullptr;
  switch (x.format) {
    case ActivationFormat::Q8_K:
      a.d = x.d + r * (k / 256);
      a.s = nullptr;
      a.bsum = x.bsum + r * (k / 16);
      break;
    case ActivationFormat::Q8_1:
      a.d = x.d + r * (k / 32);
      a.s = x.s + r * (k / 32);
      a.bsum = nullptr;
      break;
    default:
      a.d = x.d != nullptr ? x.d + r * (k / 32) : nullptr;
      a.s = nullptr;
      a.bsum = nullptr;
      break;
  }
  return a;
}

// Grid: (weight rows / kWarpsPerBlock, row tiles). A tile holds kRows rows
// (fewer in the last tile: rows past n_rows are skipped, never computed).
// Each lane loads kUnroll units before using any, so a warp keeps several
// weight loads in flight (a decode matvec is memory-latency bound); the
// per-lane order of the sums is still u = lane, lane + 32, lane + 64, ...
struct Targets {
  MatvecTarget t[kMaxMatvecTargets];
  unsigned first_block[kMaxMatvecTargets + 1];  // blocks of target i: [first_block[i], first_block[i+1])
  int count;
};

template <typename T, int kRows, int kUnroll>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    matvec_kernel(Targets targets, size_t row_bytes, int n_units, ActivationView x, size_t n_rows) {
  int m = 0;
  while (m + 1 < targets.count && blockIdx.x >= targets.first_block[m + 1]) ++m;
  const MatvecTarget& target = targets.t[m];
  const uint8_t* __restrict__ w = static_cast<const uint8_t*>(target.w);
  float* __restrict__ y = target.y;
  float* residual = target.residual;
  const size_t n_out = target.n_out, ld_y = target.ld_y;
  const size_t n = static_cast<size_t>(blockIdx.x - targets.first_block[m]) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= n_out) return;
  const size_t row0 = static_cast<size_t>(blockIdx.y) * kRows;
  const uint8_t* wrow = w + n * row_bytes;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  for (int u0 = lane; u0 < n_units; u0 += 32 * kUnroll) {
    typename T::Unit unit[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      if (u0 + 32 * j < n_units) T::load(wrow, u0 + 32 * j, unit[j]);
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int u = u0 + 32 * j;
      if (u >= n_units) break;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (row0 + r < n_rows) acc[r] += T::dot(unit[j], act_row(x, row0 + r), u);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float total = warp_sum(acc[r]);
    if (lane == 0 && row0 + r < n_rows) {
      y[(row0 + r) * ld_y + n] = total;
      if (residual != nullptr) residual[(row0 + r) * n_out + n] += total;
    }
  }
}

template <typename T, int kRows>
void launch_matvec(const Targets& targets, const ActivationView& x, size_t n_rows, cudaStream_t stream) {
  const size_t k = x.k;
  const size_t row_bytes = k / T::kBlockElems * T::kBlockBytes;
  const int n_units = static_cast<int>(k / 32);
  const dim3 grid(targets.first_block[targets.count], ceil_div(n_rows, kRows));
  // Float units are 32 registers each: no room to hold several.
  constexpr int kUnroll = T::kFormat == ActivationFormat::F32 ? 1 : 4;
  matvec_kernel<T, kRows, kUnroll><<<grid, kWarpsPerBlock * 32, 0, stream>>>(targets, row_bytes, n_units, x, n_rows);
  check_launch("matvec");
}

}  // namespace

void matvec_multi(DType type, const MatvecTarget* list, int count, const ActivationView& x, size_t n_rows,
                  void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (n_rows == 0 || count == 0) return;
  if (count > kMaxMatvecTargets) throw InternalError("[cuda matvec] too many targets");
  if (x.format != activation_format(type)) {
    throw InternalError(std::string("[cuda matvec] weights of type ") + dtype_info(type).name + " need " +
                        activation_format_name(activation_format(type)) + " activations, got " +
                        activation_format_name(x.format));
  }
  if (x.k % 32 != 0 || x.k % dtype_info(type).block_elems != 0) {
    throw InternalError("[cuda matvec] row length " + std::to_string(x.k) + " is not a block multiple");
  }
  Targets targets{};
  targets.count = count;
  targets.first_block[0] = 0;
  for (int i = 0; i < count; ++i) {
    targets.t[i] = list[i];
    targets.first_block[i + 1] = targets.first_block[i] + ceil_div(list[i].n_out, kWarpsPerBlock);
  }
  if (targets.first_block[count] == 0) return;
  const bool ok = dispatch_type(type, [&]<typename T>() {
    // Decode groups get a tile of exactly their row count; longer batches
    // walk tiles of kPrefillTileRows. Every variant computes a row the same way.
    switch (n_rows) {
      case 1: launch_matvec<T, 1>(targets, x, n_rows, stream); break;
      case 2: launch_matvec<T, 2>(targets, x, n_rows, stream); break;
      case 3: launch_matvec<T, 3>(targets, x, n_rows, stream); break;
      case 4: launch_matvec<T, 4>(targets, x, n_rows, stream); break;
      default: launch_matvec<T, kPrefillTileRows>(targets, x, n_rows, stream); break;
    }
  });
  if (!ok) throw InternalError(std::string("[cuda matvec] no kernel for type ") + dtype_info(type).name);
}

void matvec(DType type, const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y,
            size_t ld_y, void* stream) {
  MatvecTarget target;
  target.w = w;
  target.n_out = n_out;
  target.y = y;
  target.ld_y = ld_y;
  matvec_multi(type, &target, 1, x, n_rows, stream);
}

}  // namespace muser::cuda
