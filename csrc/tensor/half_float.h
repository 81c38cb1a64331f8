// Portable scalar conversions between fp32 and the two 16-bit float formats
// GGUF uses (IEEE binary16 and bfloat16), on raw bit patterns. Exact: fp16 ->
// fp32 and bf16 -> fp32 are lossless; fp32 -> fp16/bf16 round to nearest,
// ties to even, as F16C's vcvtps2ph and ggml do. SIMD files use hardware
// conversions (F16C, AVX-512) that give the same bits.
//
// The functions are `static inline` on purpose: this header is also included
// by the *_avx2.cpp / *_avx512.cpp files, and an ordinary inline function
// compiled there could be the one copy the linker keeps for the whole
// library, putting AVX instructions into baseline code paths.
#pragma once

#include <cstdint>
#include <cstring>

namespace muser {

static inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

static inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

static inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {  // inf / NaN: keep the payload
    return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent != 0) {  // normal: rebias 15 -> 127
    return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return bits_to_float(sign);
  // Subnormal half: value = mantissa * 2^-24, exactly representable in fp32.
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  mantissa &= 0x3ffu;
  return bits_to_float(sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13));
}

static inline uint16_t fp32_to_fp16(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) {  // inf stays inf, NaN stays a quiet NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs_bits > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs_bits >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  const int exponent = static_cast<int>(abs_bits >> 23) - 127;
  if (exponent < -25) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;  // 24-bit significand
  // Bits dropped: 13 for normal halves, more for subnormals (exponent < -14).
  const int drop = exponent < -14 ? 13 + (-14 - exponent) : 13;
  const uint32_t kept = mantissa >> drop;
  const uint32_t rest = mantissa & ((1u << drop) - 1u);
  const uint32_t half_way = 1u << (drop - 1);
  uint32_t rounded = kept + ((rest > half_way || (rest == half_way && (kept & 1u))) ? 1u : 0u);
  if (exponent < -14) {
    // Subnormal (or rounds up into the smallest normal: the carry lands in
    // the exponent field by itself).
    return static_cast<uint16_t>(sign | rounded);
  }
  // Normal: kept includes the implicit bit; a carry out of the mantissa bumps
  // the exponent, which the addition handles.
  const uint32_t half_bits = (static_cast<uint32_t>(exponent + 15) << 10) + (rounded - 0x400u);
  return static_cast<uint16_t>(sign | half_bits);
}

static inline float bf16_to_fp32(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

static inline uint16_t fp32_to_bf16(float f) {
  const uint32_t bits = float_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: force quiet
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace muser
