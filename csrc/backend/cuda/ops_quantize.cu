// Activation quantization on the device, bit for bit the scalar reference
// (ref::quantize_row_q8_0 / _q8_1 / _q8_K): the same amax, the same
// divisions, round to nearest even, the same fp16 roundings of d and s.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/quantize_block.cuh"
#include "core/error.h"

namespace muser::cuda {
namespace {

// One warp per 32-element block (Q8_0, and Q8_1 with its sum).
template <bool kWithSum>
__global__ void quantize_q8_32(const float* __restrict__ x, size_t n_blocks_total, int8_t* __restrict__ q,
                               float* __restrict__ d, float* __restrict__ s) {
  dependent_launch_begin();
  const size_t block = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (block >= n_blocks_total) return;
  quantize_block32<kWithSum>(x[block * 32 + threadIdx.x % 32], threadIdx.x % 32, block, q, d, s);
}

// One 256-thread block per 256-element super-block (Q8_K).
__global__ void quantize_q8_k(const float* __restrict__ x, int8_t* __restrict__ q, float* __restrict__ d,
                              int32_t* __restrict__ bsum) {
  dependent_launch_begin();
  const size_t block = blockIdx.x;
  const int t = threadIdx.x;
  const float v = x[block * 256 + t];
  // The element of largest magnitude, the first one on ties: reduce
  // (|v|, -index) lexicographically, exact in any order.
  __shared__ float best_abs[8];
  __shared__ int best_idx[8];
  float a = fabsf(v);
  if (!(a == a)) a = -1.0f;  // NaN is never "larger" in the reference (ax > amax fails)
  int idx = t;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float oa = __shfl_xor_sync(0xffffffffu, a, offset);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, offset);
    if (oa > a || (oa == a && oi < idx)) {
      a = oa;
      idx = oi;
    }
  }
  if (t % 32 == 0) {
    best_abs[t / 32] = a;
    best_idx[t / 32] = idx;
  }
  __syncthreads();
  __shared__ float extreme_s;
  __shared__ float amax_s;
  if (t == 0) {
    float ba = best_abs[0];
    int bi = best_idx[0];
    for (int w = 1; w < 8; ++w) {
      if (best_abs[w] > ba || (best_abs[w] == ba && best_idx[w] < bi)) {
        ba = best_abs[w];
        bi = best_idx[w];
      }
    }
    amax_s = ba > 0.0f ? ba : 0.0f;
    extreme_s = x[block * 256 + bi];
  }
  __syncthreads();
  if (amax_s == 0.0f) {
    q[block * 256 + t] = 0;
    if (t < 16) bsum[block * 16 + t] = 0;
    if (t == 0) d[block] = 0.0f;
    return;
  }
  const float iscale = -127.0f / extreme_s;
  const int8_t qv = round_to_int8(iscale * v);
  q[block * 256 + t] = qv;
  // Sums of each 16 quants: half-warp reductions (exact integers).
  int sum = qv;
#pragma unroll
  for (int offset = 8; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (t % 16 == 0) bsum[block * 16 + t / 16] = sum;
  if (t == 0) d[block] = 1.0f / iscale;
}

size_t align_up(size_t n) { return (n + 255) & ~static_cast<size_t>(255); }

}  // namespace

size_t activation_bytes(ActivationFormat format, size_t n_rows, size_t k) {
  const size_t elems = n_rows * k;
  switch (format) {
    case ActivationFormat::F32: return 0;
    case ActivationFormat::Q8_0:
      return align_up(elems) + align_up(elems / 32 * 4) + align_up(gemm_activation_pack_bytes(format, n_rows, k));
    case ActivationFormat::Q8_1: return align_up(elems) + 2 * align_up(elems / 32 * 4);
    case ActivationFormat::Q8_K:
      return align_up(elems) + align_up(elems / 256 * 4) + align_up(elems / 16 * 4) +
             align_up(gemm_activation_pack_bytes(format, n_rows, k));
  }
  throw InternalError("[cuda activation_bytes] unhandled format");
}

ActivationView activation_view(ActivationFormat format, size_t n_rows, size_t k, void* scratch) {
  ActivationView view;
  view.format = format;
  view.k = k;
  if (format == ActivationFormat::F32) return view;
  if (k % activation_block_elems(format) != 0) {
    throw InternalError("[cuda quantize] row length " + std::to_string(k) + " is not a block multiple");
  }
  const size_t elems = n_rows * k;
  uint8_t* base = static_cast<uint8_t*>(scratch);
  view.q = reinterpret_cast<int8_t*>(base);
  base += align_up(elems);
  if (format == ActivationFormat::Q8_K) {
    view.d = reinterpret_cast<float*>(base);
    base += align_up(elems / 256 * 4);
    view.bsum = reinterpret_cast<int32_t*>(base);
    base += align_up(elems / 16 * 4);
    if (gemm_activation_pack_bytes(format, n_rows, k) != 0) view.gemm_pack = base;
    return view;
  }
  view.d = reinterpret_cast<float*>(base);
  base += align_up(elems / 32 * 4);
  if (format == ActivationFormat::Q8_1) view.s = reinterpret_cast<float*>(base);
  if (gemm_activation_pack_bytes(format, n_rows, k) != 0) view.gemm_pack = base;
  return view;
}

ActivationView quantize_activations(ActivationFormat format, const float* x, size_t n_rows, size_t k,
                                    void* scratch, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  ActivationView view = activation_view(format, n_rows, k, scratch);
  if (format == ActivationFormat::F32) {
    view.f = x;
    return view;
  }
  // The view's pointers are written through here (they are const for the matvec).
  int8_t* q = const_cast<int8_t*>(view.q);
  float* d = const_cast<float*>(view.d);
  const size_t elems = n_rows * k;
  if (format == ActivationFormat::Q8_K) {
    if (elems > 0) {
      launch_dependent(quantize_q8_k, static_cast<unsigned>(elems / 256), 256, 0, stream, x, q, d,
                       const_cast<int32_t*>(view.bsum));
    }
    check_launch("quantize_q8_k");
    return view;
  }
  const size_t n_blocks = elems / 32;
  const unsigned grid = ceil_div(n_blocks * 32, 256);
  if (format == ActivationFormat::Q8_1) {
    if (n_blocks > 0) launch_dependent(quantize_q8_32<true>, grid, 256, 0, stream, x, n_blocks, q, d,
                                       const_cast<float*>(view.s));
  } else {
    if (n_blocks > 0) launch_dependent(quantize_q8_32<false>, grid, 256, 0, stream, x, n_blocks, q, d, nullptr);
  }
  check_launch("quantize_q8_32");
  return view;
}

}  // namespace muser::cuda
