// Activation quantization on the device, bit for bit the scalar reference
// (ref::quantize_row_q8_0 / _q8_1 / _q8_K): the same amax, the same
// divisions, round to nearest even, the same fp16 roundings of d and s.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace muser::cuda {
namespace {

// The reference's round_to_int8: NaN -> 0, clamp to +-127, nearest-even.
__device__ __forceinline__ int8_t round_to_int8(float v) {
  if (!(v == v)) return 0;
  v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
  return static_cast<int8_t>(__float2int_rn(v));
}

// One warp per 32-element block (Q8_0, and Q8_1 with its sum).
template <bool kWithSum>
__global__ void quantize_q8_32(const float* __restrict__ x, size_t n_blocks_total, size_t blocks_per_row,
                               int8_t* __restrict__ q, float* __restrict__ d, float* __restrict__ s) {
  const size_t block = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (block >= n_blocks_total) return;
  const float v = x[block * 32 + lane];
  // max is exact in any order; NaN never wins, as in the reference's max_abs.
  float amax = fabsf(v);
  if (!(amax == amax)) amax = 0.0f;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, amax, offset);
    amax = other > amax ? other : amax;
  }
  const float dd = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const int8_t qv = round_to_int8(v * id);
  q[block * 32 + lane] = qv;
  const float d_half = f16_bits_to_f32(f32_to_f16_bits(dd));
  if (lane == 0) d[block] = d_half;
  if (kWithSum) {
    const int sum = warp_sum(static_cast<int>(qv));
    if (lane == 0) s[block] = f16_bits_to_f32(f32_to_f16_bits(dd * static_cast<float>(sum)));
  }
  (void)blocks_per_row;
}

// One 256-thread block per 256-element super-block (Q8_K).
__global__ void quantize_q8_k(const float* __restrict__ x, int8_t* __restrict__ q, float* __restrict__ d,
                              int32_t* __restrict__ bsum) {
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
    case ActivationFormat::Q8_0: return align_up(elems) + align_up(elems / 32 * 4);
    case ActivationFormat::Q8_1: return align_up(elems) + 2 * align_up(elems / 32 * 4);
    case ActivationFormat::Q8_K: return align_up(elems) + align_up(elems / 256 * 4) + align_up(elems / 16 * 4);
  }
  throw InternalError("[cuda activation_bytes] unhandled format");
}

ActivationView quantize_activations(ActivationFormat format, const float* x, size_t n_rows, size_t k,
                                    void* scratch, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  ActivationView view;
  view.format = format;
  view.k = k;
  const size_t elems = n_rows * k;
  if (format == ActivationFormat::F32) {
    view.f = x;
    return view;
  }
  if (k % activation_block_elems(format) != 0) {
    throw InternalError("[cuda quantize] row length " + std::to_string(k) + " is not a block multiple");
  }
  uint8_t* base = static_cast<uint8_t*>(scratch);
  int8_t* q = reinterpret_cast<int8_t*>(base);
  base += align_up(elems);
  view.q = q;
  if (format == ActivationFormat::Q8_K) {
    float* d = reinterpret_cast<float*>(base);
    base += align_up(elems / 256 * 4);
    int32_t* bsum = reinterpret_cast<int32_t*>(base);
    view.d = d;
    view.bsum = bsum;
    if (elems > 0) quantize_q8_k<<<static_cast<unsigned>(elems / 256), 256, 0, stream>>>(x, q, d, bsum);
    check_launch("quantize_q8_k");
    return view;
  }
  float* d = reinterpret_cast<float*>(base);
  base += align_up(elems / 32 * 4);
  view.d = d;
  const size_t n_blocks = elems / 32;
  const unsigned grid = ceil_div(n_blocks * 32, 256);
  if (format == ActivationFormat::Q8_1) {
    float* s = reinterpret_cast<float*>(base);
    view.s = s;
    if (n_blocks > 0) quantize_q8_32<true><<<grid, 256, 0, stream>>>(x, n_blocks, k / 32, q, d, s);
  } else {
    if (n_blocks > 0) quantize_q8_32<false><<<grid, 256, 0, stream>>>(x, n_blocks, k / 32, q, d, nullptr);
  }
  check_launch("quantize_q8_32");
  return view;
}

}  // namespace muser::cuda
