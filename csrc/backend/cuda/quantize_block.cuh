// The Q8_0 / Q8_1 quantization of one 32-element block by one warp, bit for
// bit the scalar reference (ref::quantize_row_q8_0 / _q8_1): shared by the
// activation quantizer and the rms_norm that quantizes its own output, so
// both write the same bytes from the same floats.
#pragma once

#include "backend/cuda/cuda_common.cuh"

namespace muser::cuda {

// The reference's round_to_int8: NaN -> 0, clamp to +-127, nearest-even.
__device__ __forceinline__ int8_t round_to_int8(float v) {
  if (!(v == v)) return 0;
  v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
  return static_cast<int8_t>(__float2int_rn(v));
}

// Lane `lane` (all 32 lanes of the warp, converged) holds element `lane` of
// block `block`, value v: writes q[block * 32 + lane], d[block] and (Q8_1)
// s[block] of the ActivationView layout.
template <bool kWithSum>
__device__ __forceinline__ void quantize_block32(float v, int lane, size_t block, int8_t* __restrict__ q,
                                                 float* __restrict__ d, float* __restrict__ s) {
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
}

}  // namespace muser::cuda
