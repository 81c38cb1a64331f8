// AVX2 + FMA + F16C versions of vec_f16.h. Reached only through
// f16_vec_ops() after the CPU check.
#include <immintrin.h>

#include "backend/cpu/vec_f16.h"
#include "tensor/half_float.h"

namespace muser::cpu {
namespace {

void to_f32_avx2(const uint16_t* x, float* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  for (; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void to_f16_avx2(const float* x, uint16_t* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

// Four independent accumulators keep the FMA units busy (one chain would
// wait on each FMA's latency); their combination order is fixed.
float dot_avx2(const float* x, const float* y, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
  const __m256 acc = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (size_t j = 0; i < n; ++i, ++j) lanes[j] += x[i] * y[i];
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

void axpy_avx2(float* y, float a, const float* x, size_t n) {
  const __m256 av = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

inline __m256 load_f16x8(const uint16_t* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}

// dot_avx2's sum for one key row, before its eight lanes are combined.
inline __m256 dot_f16_lanes(const float* q, const uint16_t* k, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_f16x8(k + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load_f16x8(k + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), load_f16x8(k + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), load_f16x8(k + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_f16x8(k + i), a0);
  return _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
}

// dot_avx2(q, to_f32(k row)) * scale: the same accumulators, fused
// multiply-adds and final sums, the key converted in registers. When n is a
// multiple of 8 (no scalar tail), eight rows at a time combine their lanes
// in one transposed pass: row r's sum is still
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) of its own lanes.
void dot_rows_avx2(const float* q, const uint16_t* k, size_t stride, size_t rows, size_t n, float scale,
                   float* scores) {
  size_t r = 0;
  if (n % 8 == 0) {
    const __m256 vscale = _mm256_set1_ps(scale);
    // (r0, r2, r4, r6 | r1, r3, r5, r7) -> r0..r7
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (; r + 8 <= rows; r += 8, k += 8 * stride) {
      __m256 s[4];
      for (int p = 0; p < 4; ++p) {
        const __m256 x = dot_f16_lanes(q, k + (2 * p) * stride, n);
        const __m256 y = dot_f16_lanes(q, k + (2 * p + 1) * stride, n);
        // (x: l0+l4, l1+l5, l2+l6, l3+l7 | y: the same)
        s[p] = _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
      }
      // Per half, rows (2p, 2p+2) or (2p+1, 2p+3): (l0+l4)+(l2+l6), (l1+l5)+(l3+l7).
      const __m256 u01 = _mm256_add_ps(_mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 2, 3, 2)));
      const __m256 u23 = _mm256_add_ps(_mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(3, 2, 3, 2)));
      const __m256 sums = _mm256_add_ps(_mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 1, 3, 1)));
      _mm256_storeu_ps(scores + r, _mm256_mul_ps(_mm256_permutevar8x32_ps(sums, order), vscale));
    }
  }
  for (; r < rows; ++r, k += stride) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, dot_f16_lanes(q, k, n));
    for (size_t i = n / 8 * 8, j = 0; i < n; ++i, ++j) {
      const float key = fp16_to_fp32(k[i]);
      lanes[j] += q[i] * key;
    }
    scores[r] = (((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]))) *
                scale;
  }
}

// axpy_avx2 row after row; 64 columns of y stay in registers over all rows.
void axpy_rows_avx2(float* y, const float* w, const uint16_t* v, size_t stride, size_t rows, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m256 y0 = _mm256_loadu_ps(y + i), y1 = _mm256_loadu_ps(y + i + 8);
    __m256 y2 = _mm256_loadu_ps(y + i + 16), y3 = _mm256_loadu_ps(y + i + 24);
    __m256 y4 = _mm256_loadu_ps(y + i + 32), y5 = _mm256_loadu_ps(y + i + 40);
    __m256 y6 = _mm256_loadu_ps(y + i + 48), y7 = _mm256_loadu_ps(y + i + 56);
    const uint16_t* row = v + i;
    for (size_t r = 0; r < rows; ++r, row += stride) {
      const __m256 a = _mm256_set1_ps(w[r]);
      y0 = _mm256_fmadd_ps(a, load_f16x8(row), y0);
      y1 = _mm256_fmadd_ps(a, load_f16x8(row + 8), y1);
      y2 = _mm256_fmadd_ps(a, load_f16x8(row + 16), y2);
      y3 = _mm256_fmadd_ps(a, load_f16x8(row + 24), y3);
      y4 = _mm256_fmadd_ps(a, load_f16x8(row + 32), y4);
      y5 = _mm256_fmadd_ps(a, load_f16x8(row + 40), y5);
      y6 = _mm256_fmadd_ps(a, load_f16x8(row + 48), y6);
      y7 = _mm256_fmadd_ps(a, load_f16x8(row + 56), y7);
    }
    _mm256_storeu_ps(y + i, y0);
    _mm256_storeu_ps(y + i + 8, y1);
    _mm256_storeu_ps(y + i + 16, y2);
    _mm256_storeu_ps(y + i + 24, y3);
    _mm256_storeu_ps(y + i + 32, y4);
    _mm256_storeu_ps(y + i + 40, y5);
    _mm256_storeu_ps(y + i + 48, y6);
    _mm256_storeu_ps(y + i + 56, y7);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 acc = _mm256_loadu_ps(y + i);
    const uint16_t* row = v + i;
    for (size_t r = 0; r < rows; ++r, row += stride) {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(w[r]), load_f16x8(row), acc);
    }
    _mm256_storeu_ps(y + i, acc);
  }
  for (; i < n; ++i) {
    for (size_t r = 0; r < rows; ++r) {
      const float value = fp16_to_fp32(v[r * stride + i]);
      y[i] += w[r] * value;
    }
  }
}

}  // namespace

const F16VecOps& avx2_f16_vec_ops() {
  static const F16VecOps ops{"avx2",    to_f32_avx2,   to_f16_avx2,   dot_avx2,
                             axpy_avx2, dot_rows_avx2, axpy_rows_avx2};
  return ops;
}

}  // namespace muser::cpu
