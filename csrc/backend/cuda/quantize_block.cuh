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

// The block's scale from its largest |element| (amax, NaN never counted):
// dd (stored rounded to f16) and the factor that maps elements to -127..127.
struct Q8Scale {
  float dd, id;
};
__device__ __forceinline__ Q8Scale q8_scale(float amax) {
  return {amax / 127.0f, amax != 0.0f ? 127.0f / amax : 0.0f};
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
  const Q8Scale sc = q8_scale(amax);
  const int8_t qv = round_to_int8(v * sc.id);
  q[block * 32 + lane] = qv;
  const float d_half = f16_bits_to_f32(f32_to_f16_bits(sc.dd));
  if (lane == 0) d[block] = d_half;
  if (kWithSum) {
    const int sum = warp_sum(static_cast<int>(qv));
    if (lane == 0) s[block] = f16_bits_to_f32(f32_to_f16_bits(sc.dd * static_cast<float>(sum)));
  }
}

// The same bytes from kLanes consecutive lanes (1 or 8; converged, the
// block's first lane a multiple of kLanes) each holding 32 / kLanes
// consecutive elements y of the block, `part` its index among them: the
// block's max and its int sum are each lane's own, then folded over the
// lanes in xor steps (both exact in any order); each lane rounds and stores
// its own elements. kLanes 1: one thread holds the whole block. q is
// 16-byte aligned.
template <bool kWithSum, int kLanes>
__device__ __forceinline__ void quantize_block32_part(const float (&y)[32 / kLanes], int part, size_t block,
                                                      int8_t* __restrict__ q, float* __restrict__ d,
                                                      float* __restrict__ s) {
  static_assert(kLanes == 1 || kLanes == 8, "a lane holds whole 16-byte words or one 4-byte word");
  constexpr int kWords = 8 / kLanes;
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < 32 / kLanes; ++e) {
    const float a = fabsf(y[e]);
    amax = a > amax ? a : amax;  // false for NaN
  }
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, amax, offset);
    amax = other > amax ? other : amax;
  }
  const Q8Scale sc = q8_scale(amax);
  uint32_t words[kWords];
  int sum = 0;
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    uint32_t word = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int8_t qv = round_to_int8(y[4 * w + b] * sc.id);
      sum += qv;
      word |= static_cast<uint32_t>(static_cast<uint8_t>(qv)) << (8 * b);
    }
    words[w] = word;
  }
  int8_t* out = q + block * 32 + 4 * kWords * part;
  if constexpr (kLanes == 1) {
    reinterpret_cast<uint4*>(out)[0] = make_uint4(words[0], words[1], words[2], words[3]);
    reinterpret_cast<uint4*>(out)[1] = make_uint4(words[4], words[5], words[6], words[7]);
  } else {
    *reinterpret_cast<uint32_t*>(out) = words[0];
  }
  if (part == 0) d[block] = f16_bits_to_f32(f32_to_f16_bits(sc.dd));
  if constexpr (kWithSum) {
#pragma unroll
    for (int offset = kLanes / 2; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (part == 0) s[block] = f16_bits_to_f32(f32_to_f16_bits(sc.dd * static_cast<float>(sum)));
  }
}

}  // namespace muser::cuda
