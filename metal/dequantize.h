// Device-side decoding of every weight type muser computes with, 16 elements
// (one MUSER_METAL_CHUNK) at a time: chunk c of a row holds elements
// [16c, 16c + 16). Each type is a struct with chunk(row, c, out), following
// the block layouts of tensor/quant_blocks.h element by element exactly as
// the scalar reference (tensor/reference_kernels.cpp) does, so the floats
// are the reference's floats.
#ifndef MUSER_METAL_DEQUANTIZE_H
#define MUSER_METAL_DEQUANTIZE_H

#include <metal_stdlib>

#include "backend/metal/kernel_args.h"
#include "tensor/quant_blocks.h"

using namespace metal;

inline float fp16_bits_to_float(uint16_t bits) { return float(as_type<half>(bits)); }
inline float bf16_bits_to_float(uint16_t bits) { return as_type<float>(uint(bits) << 16); }

struct WeightF32 {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const float* x = (device const float*)row + 16 * c;
    for (uint i = 0; i < 16; ++i) out[i] = x[i];
  }
};

struct WeightF16 {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const half* x = (device const half*)row + 16 * c;
    for (uint i = 0; i < 16; ++i) out[i] = float(x[i]);
  }
};

struct WeightBF16 {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const uint16_t* x = (device const uint16_t*)row + 16 * c;
    for (uint i = 0; i < 16; ++i) out[i] = bf16_bits_to_float(x[i]);
  }
};

// 32-element blocks: chunk 0 of a block is the low nibbles (elements 0..15),
// chunk 1 the high nibbles (16..31).
struct WeightQ4_0 {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const BlockQ4_0* b = (device const BlockQ4_0*)row + c / 2;
    const float d = fp16_bits_to_float(b->d);
    const uint shift = (c % 2) * 4;
    for (uint j = 0; j < 16; ++j) out[j] = float(int((b->qs[j] >> shift) & 0x0f) - 8) * d;
  }
};

struct WeightQ4_1 {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const BlockQ4_1* b = (device const BlockQ4_1*)row + c / 2;
    const float d = fp16_bits_to_float(b->d);
    const float m = fp16_bits_to_float(b->m);
    const uint shift = (c % 2) * 4;
    for (uint j = 0; j < 16; ++j) out[j] = float((b->qs[j] >> shift) & 0x0f) * d + m;
  }
};

inline uint load_qh(device const uint8_t* qh) {
  return uint(qh[0]) | (uint(qh[1]) << 8) | (uint(qh[2]) << 16) | (uint(qh[3]) << 24);
}

struct WeightQ5_0 {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const BlockQ5_0* b = (device const BlockQ5_0*)row + c / 2;
    const float d = fp16_bits_to_float(b->d);
    const uint qh = load_qh(b->qh);
    const uint half_index = c % 2;
    for (uint j = 0; j < 16; ++j) {
      const uint q = ((b->qs[j] >> (4 * half_index)) & 0x0f) | (((qh >> (j + 16 * half_index)) & 1) << 4);
      out[j] = float(int(q) - 16) * d;
    }
  }
};

struct WeightQ5_1 {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const BlockQ5_1* b = (device const BlockQ5_1*)row + c / 2;
    const float d = fp16_bits_to_float(b->d);
    const float m = fp16_bits_to_float(b->m);
    const uint qh = load_qh(b->qh);
    const uint half_index = c % 2;
    for (uint j = 0; j < 16; ++j) {
      const uint q = ((b->qs[j] >> (4 * half_index)) & 0x0f) | (((qh >> (j + 16 * half_index)) & 1) << 4);
      out[j] = float(q) * d + m;
    }
  }
};

struct WeightQ8_0 {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const BlockQ8_0* b = (device const BlockQ8_0*)row + c / 2;
    const float d = fp16_bits_to_float(b->d);
    device const int8_t* q = b->qs + 16 * (c % 2);
    for (uint j = 0; j < 16; ++j) out[j] = float(q[j]) * d;
  }
};

// 256-element super-blocks: chunk s = c % 16 of a block is sub-block s of 16
// elements (Q2_K, Q3_K, Q6_K scales are per 16; Q4_K/Q5_K per 32).
struct WeightQ2_K {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const BlockQ2_K* b = (device const BlockQ2_K*)row + c / 16;
    const uint s = c % 16;
    const float d = fp16_bits_to_float(b->d);
    const float dmin = fp16_bits_to_float(b->dmin);
    const float dl = d * float(b->scales[s] & 0x0f);
    const float ml = dmin * float(b->scales[s] >> 4);
    for (uint l = 0; l < 16; ++l) {
      const uint e = 16 * s + l;  // element in the block: 128 h + 32 k + i
      const uint h = e / 128, k = (e % 128) / 32, i = e % 32;
      const uint q = (b->qs[32 * h + i] >> (2 * k)) & 3;
      out[l] = dl * float(q) - ml;
    }
  }
};

struct WeightQ3_K {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const BlockQ3_K* b = (device const BlockQ3_K*)row + c / 16;
    const uint s = c % 16;
    const int low = s < 8 ? (b->scales[s] & 0x0f) : (b->scales[s - 8] >> 4);
    const int high = (b->scales[8 + s % 4] >> (2 * (s / 4))) & 0x03;
    const float dl = fp16_bits_to_float(b->d) * float((low | (high << 4)) - 32);
    for (uint l = 0; l < 16; ++l) {
      const uint e = 16 * s + l;
      const uint h = e / 128, k = (e % 128) / 32, i = e % 32;
      const int q_low = (b->qs[32 * h + i] >> (2 * k)) & 3;
      const bool high_set = ((b->hmask[i] >> (4 * h + k)) & 1) != 0;
      out[l] = dl * float(q_low - (high_set ? 0 : 4));
    }
  }
};

// Pairs 0..3 are the low six bits of bytes j (scale) and j + 4 (min); pairs
// 4..7 take a nibble of bytes j + 4 and their top bits from bytes j - 4, j.
inline void k4_scale_min(device const uint8_t* packed, uint j, thread int& scale, thread int& min_value) {
  if (j < 4) {
    scale = packed[j] & 63;
    min_value = packed[j + 4] & 63;
  } else {
    scale = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
    min_value = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

struct WeightQ4_K {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const BlockQ4_K* b = (device const BlockQ4_K*)row + c / 16;
    const uint first = 16 * (c % 16);  // first element of the chunk in the block
    int scale = 0, min_value = 0;
    k4_scale_min(b->scales, first / 32, scale, min_value);
    const float dl = fp16_bits_to_float(b->d) * float(scale);
    const float ml = fp16_bits_to_float(b->dmin) * float(min_value);
    const uint p = first / 64;
    const bool high_nibble = (first % 64) >= 32;
    for (uint l = 0; l < 16; ++l) {
      const uint i = (first % 32) + l;
      const uint byte = b->qs[32 * p + i];
      const uint q = high_nibble ? (byte >> 4) : (byte & 0x0f);
      out[l] = dl * float(q) - ml;
    }
  }
};

struct WeightQ5_K {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const BlockQ5_K* b = (device const BlockQ5_K*)row + c / 16;
    const uint first = 16 * (c % 16);
    int scale = 0, min_value = 0;
    k4_scale_min(b->scales, first / 32, scale, min_value);
    const float dl = fp16_bits_to_float(b->d) * float(scale);
    const float ml = fp16_bits_to_float(b->dmin) * float(min_value);
    const uint p = first / 64;
    const bool high_nibble = (first % 64) >= 32;
    for (uint l = 0; l < 16; ++l) {
      const uint i = (first % 32) + l;
      const uint byte = b->qs[32 * p + i];
      const uint low4 = high_nibble ? (byte >> 4) : (byte & 0x0f);
      const uint bit = (b->qh[i] >> (2 * p + (high_nibble ? 1 : 0))) & 1;
      out[l] = dl * float(low4 | (bit << 4)) - ml;
    }
  }
};

struct WeightQ6_K {
  static void chunk(device const uchar* row, uint c, thread float* out) {
    device const BlockQ6_K* b = (device const BlockQ6_K*)row + c / 16;
    const uint s = c % 16;
    const float dl = fp16_bits_to_float(b->d) * float(b->scales[s]);
    for (uint l = 0; l < 16; ++l) {
      const uint e = 16 * s + l;
      const uint h = e / 128, r = e % 128, quarter = r / 32, i = r % 32;
      device const uint8_t* ql = b->ql + 64 * h;
      device const uint8_t* qh = b->qh + 32 * h;
      // quarter 0: low nibble of ql[i], 1: low of ql[i+32], 2: high of ql[i],
      // 3: high of ql[i+32]; top two bits from qh[i] bits 2*quarter.
      const uint low4 = (quarter % 2 == 0 ? ql[i] : ql[i + 32]) >> (quarter >= 2 ? 4 : 0);
      const int q = int((low4 & 0x0f) | (((qh[i] >> (2 * quarter)) & 3) << 4)) - 32;
      out[l] = dl * float(q);
    }
  }
};

#endif  // MUSER_METAL_DEQUANTIZE_H
