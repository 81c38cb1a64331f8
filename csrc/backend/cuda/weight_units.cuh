// Per-type decoding of GGUF weight blocks for the CUDA kernels, in "units" of
// 32 consecutive elements of a weight row (a whole block for the 32-element
// formats, one eighth of a super-block for the K-quants).
//
// For each type T:
//   T::kBlockElems, T::kBlockBytes, T::kFormat (its activation format)
//   T::Unit               the unit's integer quants (8 words of 4 int8) and scales
//   T::load(row, u, unit) decodes unit u of a weight row
//                         (32-element types: load_block(block, unit), the same
//                         from the block's address)
//   T::dot(unit, act, u)  the unit's contribution to a row's dot product:
//                         integer sums (exact, any order) times float scales
//                         (32-element types and Q4_K: T::add_dot(acc, unit,
//                         act, u), the contribution added to acc)
//   T::dequant(row, u, j) element j of unit u as the reference dequantizes it
// The 32-element types also have T::kHasMin (a weight min times the Q8_1 s)
// and T::add_scaled(acc, sumf, wd, wm, ad, as), the float part of
// T::add_dot on the exact block sum: the tensor-core GEMM (ops_gemm_mma.cu)
// calls it too, so both kernels round every term alike. add_unit_term (at
// the end) adds a unit's term for any type.
//
// Layouts follow tensor/quant_blocks.h; comments there give the bit layout.
#pragma once

#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace muser::cuda {

// One row of an ActivationView, as the kernels read it.
struct ActRow {
  const int* q;         // 4 quants per word, 16-byte aligned per unit
  const float* d;
  const float* s;
  const int32_t* bsum;
  const float* f;
};

// dp4a.s32.s32 as CUDA's __dp4a, but not `asm volatile` as its header
// writes it: a volatile asm is a barrier the compiler cannot move loads
// across or merge them over, so the matvec tiles that take several weight
// rows per warp reloaded every activation unit per row. The same
// instruction, the same integer result.
__device__ __forceinline__ int dp4a(int a, int b, int c) {
  int d;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Sum of 4 words of quants times 4 words of activations.
__device__ __forceinline__ int dot16(const int* w, const int4& a) {
  int s = dp4a(w[0], a.x, 0);
  s = dp4a(w[1], a.y, s);
  s = dp4a(w[2], a.z, s);
  return dp4a(w[3], a.w, s);
}

__device__ __forceinline__ void load_act(const ActRow& a, int u, int4& lo, int4& hi) {
  const int4* p = reinterpret_cast<const int4*>(a.q + 8 * u);
  lo = p[0];
  hi = p[1];
}

// Spreads bits 0..3 of `bits` to bit 4 of bytes 0..3.
__device__ __forceinline__ int spread_bit4(uint32_t bits) {
  return static_cast<int>(((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25));
}

// ---- 32-element formats ------------------------------------------------

struct TypeQ4_0 {
  static constexpr int kBlockElems = 32, kBlockBytes = 18, kUnitsPerBlock = 1;
  static constexpr ActivationFormat kFormat = ActivationFormat::Q8_0;
  static constexpr bool kHasMin = false;
  struct Unit { int q[8]; float d; };
  __device__ static void load(const uint8_t* row, int u, Unit& w) { load_block(row + kBlockBytes * u, w); }
  __device__ static void load_block(const uint8_t* b, Unit& w) {
    w.d = f16_bits_to_f32(load_u16(b));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = load_u32_a2(b + 2 + 4 * i);
      // q - 8 as signed bytes: elements 4i.. (low nibbles), 16+4i.. (high).
      w.q[i] = static_cast<int>(__vsub4(v & 0x0f0f0f0fu, 0x08080808u));
      w.q[4 + i] = static_cast<int>(__vsub4((v >> 4) & 0x0f0f0f0fu, 0x08080808u));
    }
  }
  __device__ static float add_dot(float acc, const Unit& w, const ActRow& a, int u) {
    int4 lo, hi;
    load_act(a, u, lo, hi);
    const int sumi = dot16(w.q, lo) + dot16(w.q + 4, hi);
    return add_scaled(acc, static_cast<float>(sumi), w.d, 0.0f, a.d[u], 0.0f);
  }
  // The block sum times the weight scale first (exact sumf: one rounding),
  // then the activation scale fused into the add. The order is the packed
  // GEMM's: from its MMA's magic-number start, sumf * wd rounded once is a
  // single fma (gemm_mma_parts.cuh, q4_0_magic_term), so a term there costs
  // two instructions where sumf * (wd * ad) would cost three.
  __device__ __forceinline__ static float add_scaled(float acc, float sumf, float wd, float, float ad, float) {
    return __fmaf_rn(__fmul_rn(sumf, wd), ad, acc);
  }
  __device__ static float dequant(const uint8_t* row, int u, int j) {
    const uint8_t* b = row + kBlockBytes * u;
    const uint8_t byte = b[2 + (j % 16)];
    const int q = j < 16 ? (byte & 0x0f) : (byte >> 4);
    return static_cast<float>(q - 8) * f16_bits_to_f32(load_u16(b));
  }
};

struct TypeQ4_1 {
  static constexpr int kBlockElems = 32, kBlockBytes = 20, kUnitsPerBlock = 1;
  static constexpr ActivationFormat kFormat = ActivationFormat::Q8_1;
  static constexpr bool kHasMin = true;
  struct Unit { int q[8]; float d, m; };
  __device__ static void load(const uint8_t* row, int u, Unit& w) { load_block(row + kBlockBytes * u, w); }
  __device__ static void load_block(const uint8_t* b, Unit& w) {
    w.d = f16_bits_to_f32(load_u16(b));
    w.m = f16_bits_to_f32(load_u16(b + 2));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = load_u32_a4(b + 4 + 4 * i);
      w.q[i] = static_cast<int>(v & 0x0f0f0f0fu);
      w.q[4 + i] = static_cast<int>((v >> 4) & 0x0f0f0f0fu);
    }
  }
  __device__ static float add_dot(float acc, const Unit& w, const ActRow& a, int u) {
    int4 lo, hi;
    load_act(a, u, lo, hi);
    const int sumi = dot16(w.q, lo) + dot16(w.q + 4, hi);
    return add_scaled(acc, static_cast<float>(sumi), w.d, w.m, a.d[u], a.s[u]);
  }
  __device__ __forceinline__ static float add_scaled(float acc, float sumf, float wd, float wm, float ad, float as) {
    return acc + (sumf * (wd * ad) + wm * as);
  }
  __device__ static float dequant(const uint8_t* row, int u, int j) {
    const uint8_t* b = row + kBlockBytes * u;
    const uint8_t byte = b[4 + (j % 16)];
    const int q = j < 16 ? (byte & 0x0f) : (byte >> 4);
    return static_cast<float>(q) * f16_bits_to_f32(load_u16(b)) + f16_bits_to_f32(load_u16(b + 2));
  }
};

struct TypeQ5_0 {
  static constexpr int kBlockElems = 32, kBlockBytes = 22, kUnitsPerBlock = 1;
  static constexpr ActivationFormat kFormat = ActivationFormat::Q8_0;
  static constexpr bool kHasMin = false;
  struct Unit { int q[8]; float d; };
  __device__ static void load(const uint8_t* row, int u, Unit& w) { load_block(row + kBlockBytes * u, w); }
  __device__ static void load_block(const uint8_t* b, Unit& w) {
    w.d = f16_bits_to_f32(load_u16(b));
    const uint32_t qh = load_u32_a2(b + 2);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = load_u32_a2(b + 6 + 4 * i);
      const uint32_t lo = (v & 0x0f0f0f0fu) | spread_bit4(qh >> (4 * i));
      const uint32_t hi = ((v >> 4) & 0x0f0f0f0fu) | spread_bit4(qh >> (16 + 4 * i));
      w.q[i] = static_cast<int>(__vsub4(lo, 0x10101010u));
      w.q[4 + i] = static_cast<int>(__vsub4(hi, 0x10101010u));
    }
  }
  __device__ static float add_dot(float acc, const Unit& w, const ActRow& a, int u) {
    int4 lo, hi;
    load_act(a, u, lo, hi);
    const int sumi = dot16(w.q, lo) + dot16(w.q + 4, hi);
    return add_scaled(acc, static_cast<float>(sumi), w.d, 0.0f, a.d[u], 0.0f);
  }
  // The term is one product, so the add fuses into it: one rounding and
  // one instruction fewer per term than acc + sumf * (wd * ad).
  __device__ __forceinline__ static float add_scaled(float acc, float sumf, float wd, float, float ad, float) {
    return __fmaf_rn(sumf, wd * ad, acc);
  }
  __device__ static float dequant(const uint8_t* row, int u, int j) {
    const uint8_t* b = row + kBlockBytes * u;
    const uint32_t qh = load_u32_a2(b + 2);
    const uint8_t byte = b[6 + (j % 16)];
    const int q = (j < 16 ? (byte & 0x0f) : (byte >> 4)) | static_cast<int>(((qh >> j) & 1u) << 4);
    return static_cast<float>(q - 16) * f16_bits_to_f32(load_u16(b));
  }
};

struct TypeQ5_1 {
  static constexpr int kBlockElems = 32, kBlockBytes = 24, kUnitsPerBlock = 1;
  static constexpr ActivationFormat kFormat = ActivationFormat::Q8_1;
  static constexpr bool kHasMin = true;
  struct Unit { int q[8]; float d, m; };
  __device__ static void load(const uint8_t* row, int u, Unit& w) { load_block(row + kBlockBytes * u, w); }
  __device__ static void load_block(const uint8_t* b, Unit& w) {
    w.d = f16_bits_to_f32(load_u16(b));
    w.m = f16_bits_to_f32(load_u16(b + 2));
    const uint32_t qh = load_u32_a4(b + 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = load_u32_a4(b + 8 + 4 * i);
      w.q[i] = static_cast<int>((v & 0x0f0f0f0fu) | spread_bit4(qh >> (4 * i)));
      w.q[4 + i] = static_cast<int>(((v >> 4) & 0x0f0f0f0fu) | spread_bit4(qh >> (16 + 4 * i)));
    }
  }
  __device__ static float add_dot(float acc, const Unit& w, const ActRow& a, int u) {
    int4 lo, hi;
    load_act(a, u, lo, hi);
    const int sumi = dot16(w.q, lo) + dot16(w.q + 4, hi);
    return add_scaled(acc, static_cast<float>(sumi), w.d, w.m, a.d[u], a.s[u]);
  }
  __device__ __forceinline__ static float add_scaled(float acc, float sumf, float wd, float wm, float ad, float as) {
    return acc + (sumf * (wd * ad) + wm * as);
  }
  __device__ static float dequant(const uint8_t* row, int u, int j) {
    const uint8_t* b = row + kBlockBytes * u;
    const uint32_t qh = load_u32_a4(b + 4);
    const uint8_t byte = b[8 + (j % 16)];
    const int q = (j < 16 ? (byte & 0x0f) : (byte >> 4)) | static_cast<int>(((qh >> j) & 1u) << 4);
    return static_cast<float>(q) * f16_bits_to_f32(load_u16(b)) + f16_bits_to_f32(load_u16(b + 2));
  }
};

struct TypeQ8_0 {
  static constexpr int kBlockElems = 32, kBlockBytes = 34, kUnitsPerBlock = 1;
  static constexpr ActivationFormat kFormat = ActivationFormat::Q8_0;
  static constexpr bool kHasMin = false;
  struct Unit { int q[8]; float d; };
  __device__ static void load(const uint8_t* row, int u, Unit& w) { load_block(row + kBlockBytes * u, w); }
  __device__ static void load_block(const uint8_t* b, Unit& w) {
    w.d = f16_bits_to_f32(load_u16(b));
#pragma unroll
    for (int i = 0; i < 8; ++i) w.q[i] = static_cast<int>(load_u32_a2(b + 2 + 4 * i));
  }
  __device__ static float add_dot(float acc, const Unit& w, const ActRow& a, int u) {
    int4 lo, hi;
    load_act(a, u, lo, hi);
    const int sumi = dot16(w.q, lo) + dot16(w.q + 4, hi);
    return add_scaled(acc, static_cast<float>(sumi), w.d, 0.0f, a.d[u], 0.0f);
  }
  // The term is one product, so the add fuses into it: one rounding and
  // one instruction fewer per term than acc + sumf * (wd * ad).
  __device__ __forceinline__ static float add_scaled(float acc, float sumf, float wd, float, float ad, float) {
    return __fmaf_rn(sumf, wd * ad, acc);
  }
  __device__ static float dequant(const uint8_t* row, int u, int j) {
    const uint8_t* b = row + kBlockBytes * u;
    return static_cast<float>(static_cast<int8_t>(b[2 + j])) * f16_bits_to_f32(load_u16(b));
  }
};

// ---- K-quants: unit u is elements 32*(u%8).. of super-block u/8 ---------

// Q4_K / Q5_K scale and min of 32-element sub-block j (reference
// decode_k4_scale_min).
__device__ __forceinline__ void k4_scale_min(const uint8_t* p, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = p[j] & 63;
    mn = p[j + 4] & 63;
  } else {
    sc = (p[j + 4] & 0x0f) | ((p[j - 4] >> 6) << 4);
    mn = (p[j + 4] >> 4) | ((p[j] >> 6) << 4);
  }
}

struct TypeQ2_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 84, kUnitsPerBlock = 8;
  static constexpr ActivationFormat kFormat = ActivationFormat::Q8_K;
  struct Unit { int q[8]; int sc0, sc1, m0, m1; float d, dmin; };
  __device__ static void load(const uint8_t* row, int u, Unit& w) {
    const uint8_t* b = row + kBlockBytes * (u / 8);
    const int t = u % 8, h = t / 4, k = t % 4;
    const uint8_t s0 = b[2 * t], s1 = b[2 * t + 1];
    w.sc0 = s0 & 0x0f; w.m0 = s0 >> 4;
    w.sc1 = s1 & 0x0f; w.m1 = s1 >> 4;
    w.d = f16_bits_to_f32(load_u16(b + 80));
    w.dmin = f16_bits_to_f32(load_u16(b + 82));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      w.q[i] = static_cast<int>((load_u32_a4(b + 16 + 32 * h + 4 * i) >> (2 * k)) & 0x03030303u);
    }
  }
  __device__ static float dot(const Unit& w, const ActRow& a, int u) {
    int4 lo, hi;
    load_act(a, u, lo, hi);
    const int si = w.sc0 * dot16(w.q, lo) + w.sc1 * dot16(w.q + 4, hi);
    const int sm = w.m0 * a.bsum[2 * u] + w.m1 * a.bsum[2 * u + 1];
    const float ad = a.d[u / 8];
    return (ad * w.d) * static_cast<float>(si) - (ad * w.dmin) * static_cast<float>(sm);
  }
  __device__ static float dequant(const uint8_t* row, int u, int j) {
    const uint8_t* b = row + kBlockBytes * (u / 8);
    const int t = u % 8, h = t / 4, k = t % 4;
    const int q = (b[16 + 32 * h + j] >> (2 * k)) & 3;
    const uint8_t sc = b[2 * t + j / 16];
    const float dl = f16_bits_to_f32(load_u16(b + 80)) * static_cast<float>(sc & 0x0f);
    const float ml = f16_bits_to_f32(load_u16(b + 82)) * static_cast<float>(sc >> 4);
    return dl * static_cast<float>(q) - ml;
  }
};

// Q3_K 6-bit scale j, without the +32 bias (reference decode_q3_k_scales).
__device__ __forceinline__ int q3k_scale(const uint8_t* p, int j) {
  const int low = j < 8 ? (p[j] & 0x0f) : (p[j - 8] >> 4);
  const int high = (p[8 + j % 4] >> (2 * (j / 4))) & 0x03;
  return (low | (high << 4)) - 32;
}

struct TypeQ3_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 110, kUnitsPerBlock = 8;
  static constexpr ActivationFormat kFormat = ActivationFormat::Q8_K;
  struct Unit { int q[8]; int sc0, sc1; float d; };
  __device__ static void load(const uint8_t* row, int u, Unit& w) {
    const uint8_t* b = row + kBlockBytes * (u / 8);
    const int t = u % 8, h = t / 4, k = t % 4;
    w.sc0 = q3k_scale(b + 96, 2 * t);
    w.sc1 = q3k_scale(b + 96, 2 * t + 1);
    w.d = f16_bits_to_f32(load_u16(b + 108));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t low = (load_u32_a2(b + 32 + 32 * h + 4 * i) >> (2 * k)) & 0x03030303u;
      const uint32_t high = (load_u32_a2(b + 4 * i) >> (4 * h + k)) & 0x01010101u;
      // Clear high bit: subtract 4 (signed bytes, no borrow between lanes).
      w.q[i] = static_cast<int>(__vsub4(low, (high ^ 0x01010101u) << 2));
    }
  }
  __device__ static float dot(const Unit& w, const ActRow& a, int u) {
    int4 lo, hi;
    load_act(a, u, lo, hi);
    const int si = w.sc0 * dot16(w.q, lo) + w.sc1 * dot16(w.q + 4, hi);
    return (a.d[u / 8] * w.d) * static_cast<float>(si);
  }
  __device__ static float dequant(const uint8_t* row, int u, int j) {
    const uint8_t* b = row + kBlockBytes * (u / 8);
    const int t = u % 8, h = t / 4, k = t % 4;
    const int low = (b[32 + 32 * h + j] >> (2 * k)) & 3;
    const bool high = (b[j] >> (4 * h + k)) & 1;
    const int q = low - (high ? 0 : 4);
    const float dl = f16_bits_to_f32(load_u16(b + 108)) * static_cast<float>(q3k_scale(b + 96, 2 * t + j / 16));
    return dl * static_cast<float>(q);
  }
};

struct TypeQ4_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 144, kUnitsPerBlock = 8;
  static constexpr ActivationFormat kFormat = ActivationFormat::Q8_K;
  struct Unit { int q[8]; int sc, mn; float d, dmin; };
  // Sub-block t from its super-block's first 16 bytes (d, dmin, the 12
  // scale bytes) and its 32 quant bytes (low nibbles for even t, high for
  // odd), both 4-byte aligned.
  __device__ __forceinline__ static void decode(const uint8_t* head, const uint8_t* quants, int t, Unit& w) {
    k4_scale_min(head + 4, t, w.sc, w.mn);
    w.d = f16_bits_to_f32(load_u16(head));
    w.dmin = f16_bits_to_f32(load_u16(head + 2));
    const int shift = 4 * (t % 2);
#pragma unroll
    for (int i = 0; i < 8; ++i) w.q[i] = static_cast<int>((load_u32_a4(quants + 4 * i) >> shift) & 0x0f0f0f0fu);
  }
  __device__ static void load(const uint8_t* row, int u, Unit& w) {
    const uint8_t* b = row + kBlockBytes * (u / 8);
    const int t = u % 8;
    decode(b, b + 16 + 32 * (t / 2), t, w);
  }
  // The tensor-core GEMM's decode of sub-block t from the 12 words
  // RawBlock<TypeQ4_K> copies (the super-block's words 0..3, then the 8
  // words of the sub-block's quant bytes): the same Unit as load's.
  __device__ static void load_raw(const uint32_t* words, int t, Unit& w) {
    decode(reinterpret_cast<const uint8_t*>(words), reinterpret_cast<const uint8_t*>(words + 4), t, w);
  }
  // A unit's term added to acc, from its exact integer sums isum (the
  // quants times the activations) and bsum (the activations' sum):
  //   acc + ad * fl(fl(d sc * isum) - d_min mn * bsum)
  // in three roundings. d sc and d_min mn are exact (an fp16's 11 significant
  // bits times 6 bits), so the first product is the exact d sc isum rounded
  // once, which the packed GEMM gets in one fma from its MMA's magic-number
  // start (gemm_mma_parts.cuh, q4_k_magic_term); the min is fused into the
  // subtraction and the activation scale into the add. Every Q4_K kernel
  // adds its terms through here or through q4_k_magic_term.
  __device__ __forceinline__ static float add_scaled(float acc, float d_sc_isum, float d_min_mn, float bsum, float ad) {
    return __fmaf_rn(ad, __fmaf_rn(-d_min_mn, bsum, d_sc_isum), acc);
  }
  __device__ static float add_dot(float acc, const Unit& w, const ActRow& a, int u) {
    int4 lo, hi;
    load_act(a, u, lo, hi);
    const int isum = dot16(w.q, lo) + dot16(w.q + 4, hi);
    const float d_sc = __fmul_rn(w.d, static_cast<float>(w.sc));
    const float d_min_mn = __fmul_rn(w.dmin, static_cast<float>(w.mn));
    const float bsum = static_cast<float>(a.bsum[2 * u] + a.bsum[2 * u + 1]);
    return add_scaled(acc, __fmul_rn(static_cast<float>(isum), d_sc), d_min_mn, bsum, a.d[u / 8]);
  }
  __device__ static float dequant(const uint8_t* row, int u, int j) {
    const uint8_t* b = row + kBlockBytes * (u / 8);
    const int t = u % 8, p = t / 2;
    const uint8_t byte = b[16 + 32 * p + j];
    const int q = (t % 2) ? (byte >> 4) : (byte & 0x0f);
    int sc, mn;
    k4_scale_min(b + 4, t, sc, mn);
    const float dl = f16_bits_to_f32(load_u16(b)) * static_cast<float>(sc);
    const float ml = f16_bits_to_f32(load_u16(b + 2)) * static_cast<float>(mn);
    return dl * static_cast<float>(q) - ml;
  }
};

struct TypeQ5_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 176, kUnitsPerBlock = 8;
  static constexpr ActivationFormat kFormat = ActivationFormat::Q8_K;
  struct Unit { int q[8]; int sc, mn; float d, dmin; };
  __device__ static void load(const uint8_t* row, int u, Unit& w) {
    const uint8_t* b = row + kBlockBytes * (u / 8);
    const int t = u % 8, p = t / 2, shift = 4 * (t % 2);
    k4_scale_min(b + 4, t, w.sc, w.mn);
    w.d = f16_bits_to_f32(load_u16(b));
    w.dmin = f16_bits_to_f32(load_u16(b + 2));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t nib = (load_u32_a4(b + 48 + 32 * p + 4 * i) >> shift) & 0x0f0f0f0fu;
      const uint32_t high = (load_u32_a4(b + 16 + 4 * i) >> t) & 0x01010101u;
      w.q[i] = static_cast<int>(nib | (high << 4));
    }
  }
  __device__ static float dot(const Unit& w, const ActRow& a, int u) {
    int4 lo, hi;
    load_act(a, u, lo, hi);
    const int si = w.sc * (dot16(w.q, lo) + dot16(w.q + 4, hi));
    const int sm = w.mn * (a.bsum[2 * u] + a.bsum[2 * u + 1]);
    const float ad = a.d[u / 8];
    return (ad * w.d) * static_cast<float>(si) - (ad * w.dmin) * static_cast<float>(sm);
  }
  __device__ static float dequant(const uint8_t* row, int u, int j) {
    const uint8_t* b = row + kBlockBytes * (u / 8);
    const int t = u % 8, p = t / 2;
    const uint8_t byte = b[48 + 32 * p + j];
    const int q = ((t % 2) ? (byte >> 4) : (byte & 0x0f)) | (((b[16 + j] >> t) & 1) << 4);
    int sc, mn;
    k4_scale_min(b + 4, t, sc, mn);
    const float dl = f16_bits_to_f32(load_u16(b)) * static_cast<float>(sc);
    const float ml = f16_bits_to_f32(load_u16(b + 2)) * static_cast<float>(mn);
    return dl * static_cast<float>(q) - ml;
  }
};

struct TypeQ6_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 210, kUnitsPerBlock = 8;
  static constexpr ActivationFormat kFormat = ActivationFormat::Q8_K;
  struct Unit { int q[8]; int sc0, sc1; float d; };
  // Unit t of a super-block: half h = t/4 (ql + 64h, qh + 32h), quarter
  // j = t%4 takes the low (j even) or high nibble of ql[l + 32*(j%2)] and
  // bits 2j..2j+1 of qh[l].
  __device__ static void load(const uint8_t* row, int u, Unit& w) {
    const uint8_t* b = row + kBlockBytes * (u / 8);
    const int t = u % 8, h = t / 4, j = t % 4;
    const uint8_t* ql = b + 64 * h + 32 * (j % 2);
    const uint8_t* qh = b + 128 + 32 * h;
    const int nib_shift = 4 * (j / 2);
    w.sc0 = static_cast<int8_t>(b[192 + 2 * t]);
    w.sc1 = static_cast<int8_t>(b[192 + 2 * t + 1]);
    w.d = f16_bits_to_f32(load_u16(b + 208));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t low = (load_u32_a2(ql + 4 * i) >> nib_shift) & 0x0f0f0f0fu;
      const uint32_t high = (load_u32_a2(qh + 4 * i) >> (2 * j)) & 0x03030303u;
      w.q[i] = static_cast<int>(__vsub4(low | (high << 4), 0x20202020u));
    }
  }
  __device__ static float dot(const Unit& w, const ActRow& a, int u) {
    int4 lo, hi;
    load_act(a, u, lo, hi);
    const int si = w.sc0 * dot16(w.q, lo) + w.sc1 * dot16(w.q + 4, hi);
    return (a.d[u / 8] * w.d) * static_cast<float>(si);
  }
  __device__ static float dequant(const uint8_t* row, int u, int l) {
    const uint8_t* b = row + kBlockBytes * (u / 8);
    const int t = u % 8, h = t / 4, j = t % 4;
    const uint8_t qlb = b[64 * h + 32 * (j % 2) + l];
    const uint8_t qhb = b[128 + 32 * h + l];
    const int q = (((j / 2) ? (qlb >> 4) : (qlb & 0x0f)) | (((qhb >> (2 * j)) & 3) << 4)) - 32;
    const float dl = f16_bits_to_f32(load_u16(b + 208)) * static_cast<float>(static_cast<int8_t>(b[192 + 2 * t + l / 16]));
    return dl * static_cast<float>(q);
  }
};

// ---- float weights: unit = 32 elements, dot in element order ------------

template <int kKind>  // 0 F32, 1 F16, 2 BF16
struct TypeFloat {
  static constexpr int kBlockElems = 1, kBlockBytes = kKind == 0 ? 4 : 2, kUnitsPerBlock = 1;
  static constexpr ActivationFormat kFormat = ActivationFormat::F32;
  struct Unit { float w[32]; };
  __device__ static float element(const uint8_t* row, size_t i) {
    if (kKind == 0) return reinterpret_cast<const float*>(row)[i];
    const uint16_t bits = reinterpret_cast<const uint16_t*>(row)[i];
    return kKind == 1 ? f16_bits_to_f32(bits) : bf16_bits_to_f32(bits);
  }
  __device__ static void load(const uint8_t* row, int u, Unit& w) {
    if (kKind == 0) {
      const float4* p = reinterpret_cast<const float4*>(row) + 8 * u;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 v = p[i];
        w.w[4 * i] = v.x; w.w[4 * i + 1] = v.y; w.w[4 * i + 2] = v.z; w.w[4 * i + 3] = v.w;
      }
    } else {
      const uint4* p = reinterpret_cast<const uint4*>(row) + 4 * u;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint4 v = p[i];
        const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const uint16_t lo = static_cast<uint16_t>(words[k] & 0xffffu), hi = static_cast<uint16_t>(words[k] >> 16);
          w.w[8 * i + 2 * k] = kKind == 1 ? f16_bits_to_f32(lo) : bf16_bits_to_f32(lo);
          w.w[8 * i + 2 * k + 1] = kKind == 1 ? f16_bits_to_f32(hi) : bf16_bits_to_f32(hi);
        }
      }
    }
  }
  __device__ static float dot(const Unit& w, const ActRow& a, int u) {
    const float4* x = reinterpret_cast<const float4*>(a.f + 32 * u);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 v = x[i];
      s = __fmaf_rn(w.w[4 * i], v.x, s);
      s = __fmaf_rn(w.w[4 * i + 1], v.y, s);
      s = __fmaf_rn(w.w[4 * i + 2], v.z, s);
      s = __fmaf_rn(w.w[4 * i + 3], v.w, s);
    }
    return s;
  }
  __device__ static float dequant(const uint8_t* row, int u, int j) { return element(row, 32 * static_cast<size_t>(u) + j); }
};

// acc plus unit u's term of one output, as every kernel adds it: the
// 32-element types and Q4_K add their own way (add_dot, add_scaled), the
// others add T::dot's float.
template <typename T>
__device__ __forceinline__ float add_unit_term(float acc, const typename T::Unit& w, const ActRow& a, int u) {
  if constexpr (T::kBlockElems == 32 || std::is_same_v<T, TypeQ4_K>) {
    return T::add_dot(acc, w, a, u);
  } else {
    return acc + T::dot(w, a, u);
  }
}

// Calls f.template operator()<T>() for the type of `type`; false when the
// type has no CUDA decoding.
template <typename F>
bool dispatch_type(DType type, F&& f) {
  switch (type) {
    case DType::F32: f.template operator()<TypeFloat<0>>(); return true;
    case DType::F16: f.template operator()<TypeFloat<1>>(); return true;
    case DType::BF16: f.template operator()<TypeFloat<2>>(); return true;
    case DType::Q4_0: f.template operator()<TypeQ4_0>(); return true;
    case DType::Q4_1: f.template operator()<TypeQ4_1>(); return true;
    case DType::Q5_0: f.template operator()<TypeQ5_0>(); return true;
    case DType::Q5_1: f.template operator()<TypeQ5_1>(); return true;
    case DType::Q8_0: f.template operator()<TypeQ8_0>(); return true;
    case DType::Q2_K: f.template operator()<TypeQ2_K>(); return true;
    case DType::Q3_K: f.template operator()<TypeQ3_K>(); return true;
    case DType::Q4_K: f.template operator()<TypeQ4_K>(); return true;
    case DType::Q5_K: f.template operator()<TypeQ5_K>(); return true;
    case DType::Q6_K: f.template operator()<TypeQ6_K>(); return true;
  }
  return false;
}

}  // namespace muser::cuda
