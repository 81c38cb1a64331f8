#include "tensor/reference_kernels.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "tensor/half_float.h"

namespace muser {

ActivationFormat activation_format(DType weight_type) {
  switch (weight_type) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      return ActivationFormat::F32;
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
      return ActivationFormat::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1:
      return ActivationFormat::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return ActivationFormat::Q8_K;
  }
  throw InternalError("[activation_format] unhandled weight type");
}

const char* activation_format_name(ActivationFormat format) {
  switch (format) {
    case ActivationFormat::F32: return "F32";
    case ActivationFormat::Q8_0: return "Q8_0";
    case ActivationFormat::Q8_1: return "Q8_1";
    case ActivationFormat::Q8_K: return "Q8_K";
  }
  return "unknown";
}

size_t activation_block_elems(ActivationFormat format) {
  switch (format) {
    case ActivationFormat::F32: return 1;
    case ActivationFormat::Q8_0:
    case ActivationFormat::Q8_1: return MUSER_QK32;
    case ActivationFormat::Q8_K: return MUSER_QK_K;
  }
  throw InternalError("[activation_block_elems] unhandled format");
}

size_t activation_row_bytes(ActivationFormat format, size_t n) {
  const size_t blocks = n / activation_block_elems(format);
  switch (format) {
    case ActivationFormat::F32: return n * sizeof(float);
    case ActivationFormat::Q8_0: return blocks * sizeof(BlockQ8_0);
    case ActivationFormat::Q8_1: return blocks * sizeof(BlockQ8_1);
    case ActivationFormat::Q8_K: return blocks * sizeof(BlockQ8_K);
  }
  throw InternalError("[activation_row_bytes] unhandled format");
}

namespace ref {
namespace {

void require_block_multiple(const char* where, size_t n, size_t block) {
  if (n % block != 0) {
    throw InvalidArgument(format_where(where, "length must be a multiple of " +
                                                  std::to_string(block) + ", got " +
                                                  std::to_string(n)));
  }
}

uint32_t load_u32_le(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Rounds to nearest, ties to even, and clamps to the symmetric int8 range;
// NaN becomes 0 so a bad activation cannot turn into undefined behaviour.
// Adding and subtracting 1.5 * 2^23 rounds any |v| < 2^22 to an integer in
// the default rounding mode; std::nearbyint would give the same value but is
// a slow library call on baseline x86-64, and this runs once per activation
// element of every matmul.
int8_t round_to_int8(float v) {
  if (!(v == v)) return 0;
  v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
  constexpr float kRoundingBias = 12582912.0f;  // 1.5 * 2^23
  const float r = (v + kRoundingBias) - kRoundingBias;
  return static_cast<int8_t>(static_cast<int>(r));
}

// Largest magnitude so far; NaN never wins (std::fmax is a library call on
// baseline x86-64).
float max_abs(float amax, float v) {
  const float a = std::fabs(v);
  return a > amax ? a : amax;
}

// Q3_K: sixteen 6-bit scales in 12 bytes. The low nibbles of scales 0..7 sit
// in bytes 0..7 low halves, of 8..15 in bytes 0..7 high halves; the top two
// bits of scale j are bits 2*(j/4) of byte 8 + j%4. Returned without the +32
// bias.
void decode_q3_k_scales(const uint8_t* packed, int* scales) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (packed[j] & 0x0f) : (packed[j - 8] >> 4);
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 0x03;
    scales[j] = (low | (high << 4)) - 32;
  }
}

// Q4_K / Q5_K: eight 6-bit (scale, min) pairs in 12 bytes. Pairs 0..3 are the
// low six bits of bytes 0..3 (scale) and 4..7 (min); pairs 4..7 take a nibble
// from bytes 8..11 and their top two bits from the spare bits of bytes 0..7.
void decode_k4_scale_min(const uint8_t* packed, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// The integer quants of one super-block, in element order, so the K-quant
// dequantizers and dot products share one decoding of the bit layout.
void unpack_q2_k(const BlockQ2_K& b, int* q) {
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) q[128 * h + 32 * k + l] = (b.qs[32 * h + l] >> (2 * k)) & 3;
    }
  }
}

void unpack_q3_k(const BlockQ3_K& b, int* q) {
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int low = (b.qs[32 * h + l] >> (2 * k)) & 3;
        const bool high_set = (b.hmask[l] >> (4 * h + k)) & 1;
        q[128 * h + 32 * k + l] = low - (high_set ? 0 : 4);
      }
    }
  }
}

void unpack_q4_k(const BlockQ4_K& b, int* q) {
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      q[64 * p + l] = b.qs[32 * p + l] & 0x0f;
      q[64 * p + 32 + l] = b.qs[32 * p + l] >> 4;
    }
  }
}

void unpack_q5_k(const BlockQ5_K& b, int* q) {
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      q[64 * p + l] = (b.qs[32 * p + l] & 0x0f) | (((b.qh[l] >> (2 * p)) & 1) << 4);
      q[64 * p + 32 + l] = (b.qs[32 * p + l] >> 4) | (((b.qh[l] >> (2 * p + 1)) & 1) << 4);
    }
  }
}

void unpack_q6_k(const BlockQ6_K& b, int* q) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    int* out = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      out[l] = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      out[l + 32] = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      out[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      out[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
    }
  }
}

// 32-element formats: element j < 16 in the low nibble of qs[j], j + 16 in
// the high nibble; the fifth bit (Q5) is bit j of qh.
void unpack_nibbles(const uint8_t* qs, int* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0x0f;
    q[j + 16] = qs[j] >> 4;
  }
}

void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  const uint32_t qh = load_u32_le(qh_bytes);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

template <typename Block>
const Block* blocks_of(const void* p) {
  return static_cast<const Block*>(p);
}

// ---- dequantization, one function per type.

void dequantize_q4_0(const BlockQ4_0* x, float* y, size_t nb) {
  int q[32];
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    unpack_nibbles(x[i].qs, q);
    for (int j = 0; j < 32; ++j) y[32 * i + j] = static_cast<float>(q[j] - 8) * d;
  }
}

void dequantize_q4_1(const BlockQ4_1* x, float* y, size_t nb) {
  int q[32];
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    unpack_nibbles(x[i].qs, q);
    for (int j = 0; j < 32; ++j) y[32 * i + j] = static_cast<float>(q[j]) * d + m;
  }
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, size_t nb) {
  int q[32];
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    unpack_q5(x[i].qs, x[i].qh, q);
    for (int j = 0; j < 32; ++j) y[32 * i + j] = static_cast<float>(q[j] - 16) * d;
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, size_t nb) {
  int q[32];
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    unpack_q5(x[i].qs, x[i].qh, q);
    for (int j = 0; j < 32; ++j) y[32 * i + j] = static_cast<float>(q[j]) * d + m;
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 32; ++j) y[32 * i + j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_q2_k(const BlockQ2_K* x, float* y, size_t nb) {
  int q[256];
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    unpack_q2_k(x[i], q);
    for (int s = 0; s < 16; ++s) {
      const float dl = d * static_cast<float>(x[i].scales[s] & 0x0f);
      const float ml = dmin * static_cast<float>(x[i].scales[s] >> 4);
      for (int l = 0; l < 16; ++l) y[256 * i + 16 * s + l] = dl * static_cast<float>(q[16 * s + l]) - ml;
    }
  }
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, size_t nb) {
  int q[256];
  int scales[16];
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    decode_q3_k_scales(x[i].scales, scales);
    unpack_q3_k(x[i], q);
    for (int s = 0; s < 16; ++s) {
      const float dl = d * static_cast<float>(scales[s]);
      for (int l = 0; l < 16; ++l) y[256 * i + 16 * s + l] = dl * static_cast<float>(q[16 * s + l]);
    }
  }
}

template <typename Block, void (*Unpack)(const Block&, int*)>
void dequantize_k4_style(const Block* x, float* y, size_t nb) {
  int q[256];
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    Unpack(x[i], q);
    for (int s = 0; s < 8; ++s) {
      int scale = 0;
      int min = 0;
      decode_k4_scale_min(x[i].scales, s, &scale, &min);
      const float dl = d * static_cast<float>(scale);
      const float ml = dmin * static_cast<float>(min);
      for (int l = 0; l < 32; ++l) y[256 * i + 32 * s + l] = dl * static_cast<float>(q[32 * s + l]) - ml;
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, size_t nb) {
  int q[256];
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    unpack_q6_k(x[i], q);
    for (int s = 0; s < 16; ++s) {
      const float dl = d * static_cast<float>(x[i].scales[s]);
      for (int l = 0; l < 16; ++l) y[256 * i + 16 * s + l] = dl * static_cast<float>(q[16 * s + l]);
    }
  }
}

// ---- dot products. Integer sum per block (or sub-block scale), then one
// float accumulation in block order.

float dot_f32(const float* w, const float* x, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

float dot_f16(const uint16_t* w, const float* x, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += fp16_to_fp32(w[i]) * x[i];
  return sum;
}

float dot_bf16(const uint16_t* w, const float* x, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += bf16_to_fp32(w[i]) * x[i];
  return sum;
}

int dot_i32(const int* q, const int8_t* a, int count) {
  int sum = 0;
  for (int j = 0; j < count; ++j) sum += q[j] * a[j];
  return sum;
}

float dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* a, size_t nb) {
  int q[32];
  float sum = 0.0f;
  for (size_t i = 0; i < nb; ++i) {
    unpack_nibbles(w[i].qs, q);
    for (int j = 0; j < 32; ++j) q[j] -= 8;
    const int sumi = dot_i32(q, a[i].qs, 32);
    sum += static_cast<float>(sumi) * (fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d));
  }
  return sum;
}

float dot_q4_1(const BlockQ4_1* w, const BlockQ8_1* a, size_t nb) {
  int q[32];
  float sum = 0.0f;
  for (size_t i = 0; i < nb; ++i) {
    unpack_nibbles(w[i].qs, q);
    const int sumi = dot_i32(q, a[i].qs, 32);
    sum += static_cast<float>(sumi) * (fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d)) +
           fp16_to_fp32(w[i].m) * fp16_to_fp32(a[i].s);
  }
  return sum;
}

float dot_q5_0(const BlockQ5_0* w, const BlockQ8_0* a, size_t nb) {
  int q[32];
  float sum = 0.0f;
  for (size_t i = 0; i < nb; ++i) {
    unpack_q5(w[i].qs, w[i].qh, q);
    for (int j = 0; j < 32; ++j) q[j] -= 16;
    const int sumi = dot_i32(q, a[i].qs, 32);
    sum += static_cast<float>(sumi) * (fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d));
  }
  return sum;
}

float dot_q5_1(const BlockQ5_1* w, const BlockQ8_1* a, size_t nb) {
  int q[32];
  float sum = 0.0f;
  for (size_t i = 0; i < nb; ++i) {
    unpack_q5(w[i].qs, w[i].qh, q);
    const int sumi = dot_i32(q, a[i].qs, 32);
    sum += static_cast<float>(sumi) * (fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d)) +
           fp16_to_fp32(w[i].m) * fp16_to_fp32(a[i].s);
  }
  return sum;
}

float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* a, size_t nb) {
  float sum = 0.0f;
  for (size_t i = 0; i < nb; ++i) {
    int sumi = 0;
    for (int j = 0; j < 32; ++j) sumi += w[i].qs[j] * a[i].qs[j];
    sum += static_cast<float>(sumi) * (fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d));
  }
  return sum;
}

float dot_q2_k(const BlockQ2_K* w, const BlockQ8_K* a, size_t nb) {
  int q[256];
  float sum = 0.0f;
  for (size_t i = 0; i < nb; ++i) {
    unpack_q2_k(w[i], q);
    int sumi = 0;
    int summ = 0;
    for (int s = 0; s < 16; ++s) {
      sumi += (w[i].scales[s] & 0x0f) * dot_i32(q + 16 * s, a[i].qs + 16 * s, 16);
      summ += (w[i].scales[s] >> 4) * a[i].bsums[s];
    }
    const float d = a[i].d * fp16_to_fp32(w[i].d);
    const float dmin = a[i].d * fp16_to_fp32(w[i].dmin);
    sum += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sum;
}

float dot_q3_k(const BlockQ3_K* w, const BlockQ8_K* a, size_t nb) {
  int q[256];
  int scales[16];
  float sum = 0.0f;
  for (size_t i = 0; i < nb; ++i) {
    unpack_q3_k(w[i], q);
    decode_q3_k_scales(w[i].scales, scales);
    int sumi = 0;
    for (int s = 0; s < 16; ++s) sumi += scales[s] * dot_i32(q + 16 * s, a[i].qs + 16 * s, 16);
    sum += a[i].d * fp16_to_fp32(w[i].d) * static_cast<float>(sumi);
  }
  return sum;
}

template <typename Block, void (*Unpack)(const Block&, int*)>
float dot_k4_style(const Block* w, const BlockQ8_K* a, size_t nb) {
  int q[256];
  float sum = 0.0f;
  for (size_t i = 0; i < nb; ++i) {
    Unpack(w[i], q);
    int sumi = 0;
    int summ = 0;
    for (int s = 0; s < 8; ++s) {
      int scale = 0;
      int min = 0;
      decode_k4_scale_min(w[i].scales, s, &scale, &min);
      sumi += scale * dot_i32(q + 32 * s, a[i].qs + 32 * s, 32);
      summ += min * (a[i].bsums[2 * s] + a[i].bsums[2 * s + 1]);
    }
    const float d = a[i].d * fp16_to_fp32(w[i].d);
    const float dmin = a[i].d * fp16_to_fp32(w[i].dmin);
    sum += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sum;
}

float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* a, size_t nb) {
  int q[256];
  float sum = 0.0f;
  for (size_t i = 0; i < nb; ++i) {
    unpack_q6_k(w[i], q);
    int sumi = 0;
    for (int s = 0; s < 16; ++s) sumi += w[i].scales[s] * dot_i32(q + 16 * s, a[i].qs + 16 * s, 16);
    sum += a[i].d * fp16_to_fp32(w[i].d) * static_cast<float>(sumi);
  }
  return sum;
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, size_t n) {
  const DTypeInfo& info = dtype_info(type);
  require_block_multiple("dequantize_row", n, info.block_elems);
  const size_t nb = n / info.block_elems;
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::Q4_0: return dequantize_q4_0(blocks_of<BlockQ4_0>(src), dst, nb);
    case DType::Q4_1: return dequantize_q4_1(blocks_of<BlockQ4_1>(src), dst, nb);
    case DType::Q5_0: return dequantize_q5_0(blocks_of<BlockQ5_0>(src), dst, nb);
    case DType::Q5_1: return dequantize_q5_1(blocks_of<BlockQ5_1>(src), dst, nb);
    case DType::Q8_0: return dequantize_q8_0(blocks_of<BlockQ8_0>(src), dst, nb);
    case DType::Q2_K: return dequantize_q2_k(blocks_of<BlockQ2_K>(src), dst, nb);
    case DType::Q3_K: return dequantize_q3_k(blocks_of<BlockQ3_K>(src), dst, nb);
    case DType::Q4_K:
      return dequantize_k4_style<BlockQ4_K, unpack_q4_k>(blocks_of<BlockQ4_K>(src), dst, nb);
    case DType::Q5_K:
      return dequantize_k4_style<BlockQ5_K, unpack_q5_k>(blocks_of<BlockQ5_K>(src), dst, nb);
    case DType::Q6_K: return dequantize_q6_k(blocks_of<BlockQ6_K>(src), dst, nb);
  }
  throw InternalError("[dequantize_row] unhandled type");
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, size_t n) {
  require_block_multiple("quantize_row_q8_0", n, MUSER_QK32);
  for (size_t i = 0; i < n / MUSER_QK32; ++i) {
    const float* xb = x + MUSER_QK32 * i;
    float amax = 0.0f;
    for (int j = 0; j < MUSER_QK32; ++j) amax = max_abs(amax, xb[j]);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < MUSER_QK32; ++j) y[i].qs[j] = round_to_int8(xb[j] * id);
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, size_t n) {
  require_block_multiple("quantize_row_q8_1", n, MUSER_QK32);
  for (size_t i = 0; i < n / MUSER_QK32; ++i) {
    const float* xb = x + MUSER_QK32 * i;
    float amax = 0.0f;
    for (int j = 0; j < MUSER_QK32; ++j) amax = max_abs(amax, xb[j]);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < MUSER_QK32; ++j) {
      y[i].qs[j] = round_to_int8(xb[j] * id);
      sum += y[i].qs[j];
    }
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

void quantize_row_q8_K(const float* x, BlockQ8_K* y, size_t n) {
  require_block_multiple("quantize_row_q8_K", n, MUSER_QK_K);
  for (size_t i = 0; i < n / MUSER_QK_K; ++i) {
    const float* xb = x + MUSER_QK_K * i;
    // The signed value of largest magnitude (first one on ties).
    float amax = 0.0f;
    float extreme = 0.0f;
    for (int j = 0; j < MUSER_QK_K; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        extreme = xb[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -127.0f / extreme;
    for (int j = 0; j < MUSER_QK_K; ++j) y[i].qs[j] = round_to_int8(iscale * xb[j]);
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

void quantize_activation_row(ActivationFormat format, const float* x, void* dst, size_t n) {
  switch (format) {
    case ActivationFormat::F32:
      std::memcpy(dst, x, n * sizeof(float));
      return;
    case ActivationFormat::Q8_0: return quantize_row_q8_0(x, static_cast<BlockQ8_0*>(dst), n);
    case ActivationFormat::Q8_1: return quantize_row_q8_1(x, static_cast<BlockQ8_1*>(dst), n);
    case ActivationFormat::Q8_K: return quantize_row_q8_K(x, static_cast<BlockQ8_K*>(dst), n);
  }
  throw InternalError("[quantize_activation_row] unhandled format");
}

float vec_dot(DType type, size_t n, const void* w, const void* a) {
  const DTypeInfo& info = dtype_info(type);
  require_block_multiple("vec_dot", n, info.block_elems);
  const size_t nb = n / info.block_elems;
  const float* af = static_cast<const float*>(a);
  switch (type) {
    case DType::F32: return dot_f32(static_cast<const float*>(w), af, n);
    case DType::F16: return dot_f16(static_cast<const uint16_t*>(w), af, n);
    case DType::BF16: return dot_bf16(static_cast<const uint16_t*>(w), af, n);
    case DType::Q4_0: return dot_q4_0(blocks_of<BlockQ4_0>(w), blocks_of<BlockQ8_0>(a), nb);
    case DType::Q4_1: return dot_q4_1(blocks_of<BlockQ4_1>(w), blocks_of<BlockQ8_1>(a), nb);
    case DType::Q5_0: return dot_q5_0(blocks_of<BlockQ5_0>(w), blocks_of<BlockQ8_0>(a), nb);
    case DType::Q5_1: return dot_q5_1(blocks_of<BlockQ5_1>(w), blocks_of<BlockQ8_1>(a), nb);
    case DType::Q8_0: return dot_q8_0(blocks_of<BlockQ8_0>(w), blocks_of<BlockQ8_0>(a), nb);
    case DType::Q2_K: return dot_q2_k(blocks_of<BlockQ2_K>(w), blocks_of<BlockQ8_K>(a), nb);
    case DType::Q3_K: return dot_q3_k(blocks_of<BlockQ3_K>(w), blocks_of<BlockQ8_K>(a), nb);
    case DType::Q4_K:
      return dot_k4_style<BlockQ4_K, unpack_q4_k>(blocks_of<BlockQ4_K>(w), blocks_of<BlockQ8_K>(a), nb);
    case DType::Q5_K:
      return dot_k4_style<BlockQ5_K, unpack_q5_k>(blocks_of<BlockQ5_K>(w), blocks_of<BlockQ8_K>(a), nb);
    case DType::Q6_K: return dot_q6_k(blocks_of<BlockQ6_K>(w), blocks_of<BlockQ8_K>(a), nb);
  }
  throw InternalError("[vec_dot] unhandled type");
}

}  // namespace ref
}  // namespace muser
