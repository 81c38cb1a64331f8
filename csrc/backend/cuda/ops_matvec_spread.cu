// The decode matvec with a warp's lanes spread over several weight rows
// (DecodeConfig::lane_rows 8), for 3..4-row groups on matrices of
// fewer than 8192 rows, where matvec_decode_kernel either shares each
// activation load between weight rows and runs out of warps (4 rows per
// warp: 160 registers, 12% occupancy on llama3-8b's down projection) or
// keeps its warps and loads each activation word once per weight row.
//
// matvec_decode_kernel gives weight row n one warp: lane l sums the terms of
// units l, l + 32, ... in increasing order, then warp_sum folds the 32
// lanes. Call the sum of lane l "virtual lane" l of the row. Each lane
// loads the activations of its own units, so a warp-wide activation load
// is 32 distinct 16-byte words (four L1 wavefronts) per weight row.
//
// Here a block of kLaneRows warps owns kLaneRows weight rows, and the lanes
// of warp w hold virtual lanes w * L .. w * L + L - 1 (L = 32 / kLaneRows)
// of every one of those rows: lane l works for row l / L, virtual lane
// w * L + l % L. The kLaneRows lanes holding one virtual lane of different
// rows read the same activation words (one L1 wavefront carries L distinct
// 16-byte words for all 32 lanes), and each thread has the registers of
// the one-row-per-warp kernel (one weight row, `unroll` units in flight).
// 8 rows per block measured faster than 4 and 16 (device calls s9-2, s9-4).
//
// Each virtual lane's sum is computed by one thread with the operations of
// matvec_decode_kernel's lane, in the same order; the block then puts the
// sums of weight row j in lanes 0..31 of warp j (through shared memory) and
// runs the same warp_sum. So every output has the bits of the other configs
// and of the prefill tiles.
#include <string>

#include "backend/cuda/matvec_decode_kernel.cuh"
#include "core/error.h"

namespace muser::cuda {
namespace {

template <typename T, int kRows, int kLaneRows, int kUnroll, bool kWide>
__global__ void __launch_bounds__(kLaneRows * 32)
    matvec_spread_kernel(DecodeTargets targets, size_t row_bytes, int n_units, ActivationView x) {
  constexpr int kLanesPerRow = 32 / kLaneRows;
  const unsigned b = blockIdx.x;
  const BlockTarget bt = block_target(targets, b);
  const size_t n0 = static_cast<size_t>(b - bt.first) * kLaneRows;  // the block's first weight row
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int row = lane / kLanesPerRow;                       // this thread's weight row in the block
  const int v = warp * kLanesPerRow + lane % kLanesPerRow;  // and its virtual lane
  // Weight rows past n_out (the target's last block's) read the last row
  // and store nothing.
  const size_t n = n0 + row < bt.n_out ? n0 + row : bt.n_out - 1;
  const uint8_t* const wrow[1] = {bt.w + n * row_bytes};
  ActRow act[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) act[r] = act_row(x, r);
  float acc[1][kRows];
  lane_sums<T, kRows, 1, kUnroll, kWide>(wrow, v, n_units, act, acc);
  // Virtual lane v of weight row j to lane v of warp j. The row stride of
  // 32 + L floats puts a warp's 32 stores in 32 banks.
  constexpr int kStride = 32 + kLanesPerRow;
  __shared__ float sums[kRows][kLaneRows * kStride];
#pragma unroll
  for (int r = 0; r < kRows; ++r) sums[r][row * kStride + v] = acc[0][r];
  __syncthreads();
  const size_t out = n0 + warp;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float total = warp_sum(sums[r][warp * kStride + lane]);
    if (lane == 0 && out < bt.n_out) bt.y[r * bt.ld_y + out] = total;
  }
}

template <typename T, int kRows, int kLaneRows, int kUnroll>
void launch_spread(const MatvecTarget* targets, size_t count, const ActivationView& x, bool wide,
                   cudaStream_t stream) {
  const size_t row_bytes = x.k / T::kBlockElems * T::kBlockBytes;
  const int n_units = static_cast<int>(x.k / 32);
  const LaunchTargets l = launch_targets(targets, count, row_bytes, kLaneRows);
  if (l.blocks == 0) return;
  bool launched = false;
  if constexpr (kHasWideLoader<T>) {
    if (wide && l.aligned) {
      launch_dependent(matvec_spread_kernel<T, kRows, kLaneRows, kUnroll, true>, l.blocks, kLaneRows * 32, 0, stream,
                       l.t, row_bytes, n_units, x);
      launched = true;
    }
  }
  if (!launched) {
    launch_dependent(matvec_spread_kernel<T, kRows, kLaneRows, kUnroll, false>, l.blocks, kLaneRows * 32, 0, stream,
                     l.t, row_bytes, n_units, x);
  }
  check_launch("matvec (decode, spread)");
}

template <typename T, int kRows>
void launch_spread_config(const DecodeConfig& c, const MatvecTarget* targets, size_t count, const ActivationView& x,
                          cudaStream_t stream) {
  if (c.unroll == 1) {
    launch_spread<T, kRows, 8, 1>(targets, count, x, c.wide, stream);
  } else {
    launch_spread<T, kRows, 8, 2>(targets, count, x, c.wide, stream);
  }
}

}  // namespace

void matvec_decode_spread(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x,
                          size_t n_rows, const DecodeConfig& config, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (config.lane_rows != 8) {
    throw InternalError("[cuda matvec] the spread kernel takes 8 weight rows per warp, got " +
                        std::to_string(config.lane_rows));
  }
  const bool typed = dispatch_type(type, [&]<typename T>() {
    switch (n_rows) {
      case 1: launch_spread_config<T, 1>(config, targets, count, x, stream); break;
      case 2: launch_spread_config<T, 2>(config, targets, count, x, stream); break;
      case 3: launch_spread_config<T, 3>(config, targets, count, x, stream); break;
      default: launch_spread_config<T, 4>(config, targets, count, x, stream); break;
    }
  });
  if (!typed) {
    throw InternalError(std::string("[cuda matvec] no spread decode kernel for type ") + dtype_info(type).name);
  }
}

}  // namespace muser::cuda
