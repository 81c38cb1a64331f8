// AVX2 + FMA + F16C versions of vec_f16.h. Reached only through
// f16_vec_ops() after the CPU check.
#include <immintrin.h>

#include <limits>

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

// Eight values of a cache row: f16 converted in registers, or float32
// already converted (dot_rows_f32 / axpy_rows_f32). Exact either way, so the
// two instantiations of each function below give the same bits.
inline __m256 load8(const uint16_t* x) { return load_f16x8(x); }
inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
inline float value(uint16_t x) { return fp16_to_fp32(x); }
inline float value(float x) { return x; }

// dot_avx2's sum for one key row, before its eight lanes are combined.
template <typename T>
inline __m256 dot_row_lanes(const float* q, const T* k, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8(k + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), load8(k + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), load8(k + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), a0);
  return _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
}

// dot_row_lanes for n = 8 * B known at compile time, q's eight-float
// blocks held in registers across the rows (two loads per multiply-add
// otherwise): the same fused multiply-adds in the same order.
template <size_t B, typename T>
inline __m256 dot_row_lanes_fixed(const __m256* qv, const T* k) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  size_t j = 0;
  for (; j + 4 <= B; j += 4) {
    a0 = _mm256_fmadd_ps(qv[j], load8(k + 8 * j), a0);
    a1 = _mm256_fmadd_ps(qv[j + 1], load8(k + 8 * j + 8), a1);
    a2 = _mm256_fmadd_ps(qv[j + 2], load8(k + 8 * j + 16), a2);
    a3 = _mm256_fmadd_ps(qv[j + 3], load8(k + 8 * j + 24), a3);
  }
  for (; j < B; ++j) a0 = _mm256_fmadd_ps(qv[j], load8(k + 8 * j), a0);
  return _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
}

// dot_avx2(q, to_f32(k row)) * scale: the same accumulators, fused
// multiply-adds and final sums, the key converted in registers. When n is a
// multiple of 8 (no scalar tail), eight rows at a time combine their lanes
// in one transposed pass: row r's sum is still
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) of its own lanes.
// `lanes(row)` is dot_row_lanes of q and that row.
template <typename T, typename Lanes>
inline void dot_rows_with(const float* q, const T* k, size_t stride, size_t rows, size_t n, float scale,
                          float* scores, Lanes lanes) {
  size_t r = 0;
  if (n % 8 == 0) {
    const __m256 vscale = _mm256_set1_ps(scale);
    // (r0, r2, r4, r6 | r1, r3, r5, r7) -> r0..r7
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (; r + 8 <= rows; r += 8, k += 8 * stride) {
      __m256 s[4];
      for (int p = 0; p < 4; ++p) {
        const __m256 x = lanes(k + (2 * p) * stride);
        const __m256 y = lanes(k + (2 * p + 1) * stride);
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
    alignas(32) float lanes8[8];
    _mm256_store_ps(lanes8, lanes(k));
    for (size_t i = n / 8 * 8, j = 0; i < n; ++i, ++j) {
      const float key = value(k[i]);
      lanes8[j] += q[i] * key;
    }
    scores[r] =
        (((lanes8[0] + lanes8[4]) + (lanes8[2] + lanes8[6])) + ((lanes8[1] + lanes8[5]) + (lanes8[3] + lanes8[7]))) *
        scale;
  }
}

template <typename T>
void dot_rows_avx2(const float* q, const T* k, size_t stride, size_t rows, size_t n, float scale, float* scores) {
  if (n == 64) {  // the common head size: q fits in eight registers
    __m256 qv[8];
    for (int j = 0; j < 8; ++j) qv[j] = _mm256_loadu_ps(q + 8 * j);
    dot_rows_with(q, k, stride, rows, n, scale, scores, [&qv](const T* row) { return dot_row_lanes_fixed<8>(qv, row); });
    return;
  }
  dot_rows_with(q, k, stride, rows, n, scale, scores, [q, n](const T* row) { return dot_row_lanes(q, row, n); });
}

// axpy_avx2 row after row; 64 columns of y stay in registers over all rows.
template <typename T>
void axpy_rows_avx2(float* y, const float* w, const T* v, size_t stride, size_t rows, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m256 y0 = _mm256_loadu_ps(y + i), y1 = _mm256_loadu_ps(y + i + 8);
    __m256 y2 = _mm256_loadu_ps(y + i + 16), y3 = _mm256_loadu_ps(y + i + 24);
    __m256 y4 = _mm256_loadu_ps(y + i + 32), y5 = _mm256_loadu_ps(y + i + 40);
    __m256 y6 = _mm256_loadu_ps(y + i + 48), y7 = _mm256_loadu_ps(y + i + 56);
    const T* row = v + i;
    for (size_t r = 0; r < rows; ++r, row += stride) {
      const __m256 a = _mm256_set1_ps(w[r]);
      y0 = _mm256_fmadd_ps(a, load8(row), y0);
      y1 = _mm256_fmadd_ps(a, load8(row + 8), y1);
      y2 = _mm256_fmadd_ps(a, load8(row + 16), y2);
      y3 = _mm256_fmadd_ps(a, load8(row + 24), y3);
      y4 = _mm256_fmadd_ps(a, load8(row + 32), y4);
      y5 = _mm256_fmadd_ps(a, load8(row + 40), y5);
      y6 = _mm256_fmadd_ps(a, load8(row + 48), y6);
      y7 = _mm256_fmadd_ps(a, load8(row + 56), y7);
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
    const T* row = v + i;
    for (size_t r = 0; r < rows; ++r, row += stride) {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(w[r]), load8(row), acc);
    }
    _mm256_storeu_ps(y + i, acc);
  }
  for (; i < n; ++i) {
    for (size_t r = 0; r < rows; ++r) {
      const float x = value(v[r * stride + i]);
      y[i] += w[r] * x;
    }
  }
}

// The queries one after another: eight 8-lane chains per 64 columns already
// keep both FMA units busy.
void axpy_rows_f32_avx2(float* const* y, const float* const* w, size_t n_y, const float* v, size_t stride,
                        size_t rows, size_t n) {
  for (size_t j = 0; j < n_y; ++j) axpy_rows_avx2(y[j], w[j], v, stride, rows, n);
}

// exp(x) for x <= 0 (softmax arguments), eight at a time: x = k ln2 + r with
// |r| <= ln2 / 2 (ln2 split in two so k ln2 is exact), e^r by a degree-7
// polynomial (Cephes' expf coefficients, error about 1 ulp), times 2^k
// built in the exponent bits. Below -87.3 the result would be subnormal:
// it is 0 (a weight of e^-87 relative to the row's largest changes nothing).
// Each lane's value depends only on that lane's x.
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  return _mm256_blendv_ps(_mm256_andnot_ps(tiny, e), x, nan);
}

// The lanes of `mask` set for elements i..i+7 below n.
inline __m256i tail_mask(size_t left) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), lane);
}

// softmax_scalar's steps, eight elements at a time; element i is always in
// lane i % 8, and the lanes' sums are added as dot_avx2 adds its lanes.
void softmax_avx2(float* x, size_t n) {
  if (n == 0) return;
  const size_t full = n / 8 * 8;
  const __m256i tail = tail_mask(n - full);
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  // max_ps(v, m) keeps m when v is NaN: NaN never becomes the maximum.
  for (size_t i = 0; i < full; i += 8) mv = _mm256_max_ps(_mm256_loadu_ps(x + i), mv);
  if (full < n) {
    const __m256 v = _mm256_blendv_ps(mv, _mm256_maskload_ps(x + full, tail), _mm256_castsi256_ps(tail));
    mv = _mm256_max_ps(v, mv);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mv);
  float max_score = lanes[0];
  for (int j = 1; j < 8; ++j) max_score = lanes[j] > max_score ? lanes[j] : max_score;
  const __m256 m = _mm256_set1_ps(max_score);
  __m256 sum = _mm256_setzero_ps();
  for (size_t i = 0; i < full; i += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (full < n) {
    const __m256 e = _mm256_and_ps(exp_nonpositive(_mm256_sub_ps(_mm256_maskload_ps(x + full, tail), m)),
                                   _mm256_castsi256_ps(tail));
    _mm256_maskstore_ps(x + full, tail, e);
    sum = _mm256_add_ps(sum, e);
  }
  _mm256_store_ps(lanes, sum);
  const float total = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  const __m256 inv = _mm256_set1_ps(1.0f / total);
  for (size_t i = 0; i < full; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  if (full < n) _mm256_maskstore_ps(x + full, tail, _mm256_mul_ps(_mm256_maskload_ps(x + full, tail), inv));
}

}  // namespace

const F16VecOps& avx2_f16_vec_ops() {
  static const F16VecOps ops{"avx2",
                             to_f32_avx2,
                             to_f16_avx2,
                             dot_avx2,
                             axpy_avx2,
                             dot_rows_avx2<uint16_t>,
                             axpy_rows_avx2<uint16_t>,
                             dot_rows_avx2<float>,
                             axpy_rows_f32_avx2,
                             softmax_avx2};
  return ops;
}

}  // namespace muser::cpu
