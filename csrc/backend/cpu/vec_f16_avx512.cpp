// AVX-512 (F + the 256-bit F16C / FMA it implies) versions of vec_f16.h:
// sixteen lanes per instruction where the AVX2 table has eight. Reached only
// through f16_vec_ops() after the CPU check.
//
// Bits: to_f32 / to_f16 / axpy / axpy_rows give exactly the AVX2 table's
// results (exact conversions; the same fused multiply-add per element and
// row, in row order, and the same scalar tails). dot / dot_rows keep their
// own fixed reduction (four 16-lane accumulators, then the 16 lanes in a
// fixed tree), so scores differ from the AVX2 table's in the last bits, as
// the exactness contract allows between instruction sets; within this table
// dot_rows equals to_f32 then dot bit for bit, for any run of rows. The
// softmax gives the AVX2 table's bits, sixteen exponentials at a time.
#include <immintrin.h>

#include <limits>

#include "backend/cpu/vec_f16.h"
#include "tensor/half_float.h"

namespace muser::cpu {

const F16VecOps& avx2_f16_vec_ops();

namespace {

inline __mmask16 first_lanes(size_t count) { return static_cast<__mmask16>((1u << count) - 1); }

void to_f32_avx512(const uint16_t* x, float* y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
  }
  for (; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void to_f16_avx512(const float* x, uint16_t* y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

// Sixteen float lanes of dot's sum, before the lanes are combined: four
// accumulators over 64-element steps, then 16-element steps into the first,
// then the last n % 16 elements, masked, into the first (masked-off lanes
// add 0 * 0). Load is float (dot) or f16 converted in registers (dot_rows):
// the same values, so the same bits.
template <typename Load>
inline __m512 dot_lanes(const float* q, size_t n, Load load) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load(i, 0xffff), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), load(i + 16, 0xffff), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 32), load(i + 32, 0xffff), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 48), load(i + 48, 0xffff), a3);
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load(i, 0xffff), a0);
  if (i < n) {
    const __mmask16 tail = first_lanes(n - i);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q + i), load(i, tail), a0);
  }
  return _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
}

// The lanes l0..l15 of one row in the fixed tree
//   s1[j] = l[j] + l[j + 8], s2[j] = s1[j] + s1[j + 4], s3[j] = s2[j] + s2[j + 2], s3[0] + s3[1]
// (sum16 below does the same additions for sixteen rows at once).
inline float sum_lanes(__m512 v) {
  const __m256 s1 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 s2 = _mm_add_ps(_mm256_castps256_ps128(s1), _mm256_extractf128_ps(s1, 1));
  const __m128 s3 = _mm_add_ps(s2, _mm_movehl_ps(s2, s2));
  return _mm_cvtss_f32(_mm_add_ss(s3, _mm_movehdup_ps(s3)));
}

// sum_lanes of sixteen rows' lanes, one row per output lane (row r in lane r).
inline __m512 sum16(const __m512* rows) {
  // s1 of rows 2p, 2p + 1: [row 2p's 8 | row 2p+1's 8]
  __m512 p[8];
  for (int k = 0; k < 8; ++k) {
    p[k] = _mm512_add_ps(_mm512_shuffle_f32x4(rows[2 * k], rows[2 * k + 1], 0x44),
                         _mm512_shuffle_f32x4(rows[2 * k], rows[2 * k + 1], 0xee));
  }
  // s2 of rows 4m..4m+3, one row per 128-bit lane
  __m512 q[4];
  for (int m = 0; m < 4; ++m) {
    q[m] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * m], p[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(p[2 * m], p[2 * m + 1], 0xdd));
  }
  // s3: 128-bit lane k holds [row k of a | row k of b] for (a, b) = (q0, q1) and (q2, q3)
  const __m512 r0 = _mm512_add_ps(_mm512_shuffle_ps(q[0], q[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(q[0], q[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 r1 = _mm512_add_ps(_mm512_shuffle_ps(q[2], q[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(q[2], q[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // 128-bit lane k: rows k, 4 + k, 8 + k, 12 + k
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(r0, r1, _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_ps(r0, r1, _MM_SHUFFLE(3, 1, 3, 1)));
  // row r = 4m + k sits at 4k + m
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, sums);
}

float dot_avx512(const float* x, const float* y, size_t n) {
  return sum_lanes(dot_lanes(x, n, [y](size_t i, __mmask16 m) { return _mm512_maskz_loadu_ps(m, y + i); }));
}

inline __m512 load_f16(const uint16_t* k, size_t i, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, k + i));
}

// Sixteen values of a cache row (masked): f16 converted in registers, or
// float32 already converted (the *_f32 entries). The same values either way.
inline __m512 load16(const uint16_t* k, size_t i, __mmask16 m) { return load_f16(k, i, m); }
inline __m512 load16(const float* k, size_t i, __mmask16 m) { return _mm512_maskz_loadu_ps(m, k + i); }

// dot_lanes for n = 16 * B, B a multiple of 4 (no 16-element steps, no
// tail), q's blocks held in registers across the rows: the same fused
// multiply-adds in the same order.
template <size_t B, typename T>
inline __m512 dot_lanes_fixed(const __m512* qv, const T* k) {
  static_assert(B % 4 == 0, "whole 64-element steps only");
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  for (size_t j = 0; j < B; j += 4) {
    a0 = _mm512_fmadd_ps(qv[j], load16(k, 16 * j, 0xffff), a0);
    a1 = _mm512_fmadd_ps(qv[j + 1], load16(k, 16 * j + 16, 0xffff), a1);
    a2 = _mm512_fmadd_ps(qv[j + 2], load16(k, 16 * j + 32, 0xffff), a2);
    a3 = _mm512_fmadd_ps(qv[j + 3], load16(k, 16 * j + 48, 0xffff), a3);
  }
  return _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
}

// `lanes(row)` is dot_lanes of q and that row.
template <typename T, typename Lanes>
inline void dot_rows_with(const T* k, size_t stride, size_t rows, float scale, float* scores, Lanes lanes) {
  const __m512 vscale = _mm512_set1_ps(scale);
  size_t r = 0;
  for (; r + 16 <= rows; r += 16, k += 16 * stride) {
    __m512 sums[16];
    for (int j = 0; j < 16; ++j) sums[j] = lanes(k + j * stride);
    _mm512_storeu_ps(scores + r, _mm512_mul_ps(sum16(sums), vscale));
  }
  for (; r < rows; ++r, k += stride) scores[r] = sum_lanes(lanes(k)) * scale;
}

// The common head sizes (64, 128) keep q in registers.
template <typename T, size_t B>
inline void dot_rows_fixed(const float* q, const T* k, size_t stride, size_t rows, float scale, float* scores) {
  __m512 qv[B];
  for (size_t j = 0; j < B; ++j) qv[j] = _mm512_loadu_ps(q + 16 * j);
  dot_rows_with(k, stride, rows, scale, scores, [&qv](const T* row) { return dot_lanes_fixed<B>(qv, row); });
}

template <typename T>
void dot_rows_avx512(const float* q, const T* k, size_t stride, size_t rows, size_t n, float scale, float* scores) {
  if (n == 64) return dot_rows_fixed<T, 4>(q, k, stride, rows, scale, scores);
  if (n == 128) return dot_rows_fixed<T, 8>(q, k, stride, rows, scale, scores);
  dot_rows_with(k, stride, rows, scale, scores, [q, n](const T* row) {
    return dot_lanes(q, n, [row](size_t i, __mmask16 m) { return load16(row, i, m); });
  });
}

// The AVX2 table's axpy, bit for bit: one fused multiply-add per element
// while eight or more remain, then its unfused scalar tail.
void axpy_avx512(float* y, float a, const float* x, size_t n) {
  const __m512 av = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  }
  if (i + 8 <= n) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm512_castps512_ps256(av), _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    i += 8;
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

// The columns after axpy_rows_avx512's 128-wide blocks: the AVX2 table's
// axpy_rows (or axpy_rows_f32), bit for bit the same per column.
inline void rest_of_axpy_rows(float* y, const float* w, const uint16_t* v, size_t stride, size_t rows, size_t n) {
  avx2_f16_vec_ops().axpy_rows(y, w, v, stride, rows, n);
}
inline void rest_of_axpy_rows(float* y, const float* w, const float* v, size_t stride, size_t rows, size_t n) {
  avx2_f16_vec_ops().axpy_rows_f32(&y, &w, 1, v, stride, rows, n);
}

// axpy_avx512 row after row, y held in registers across the rows: 128
// columns at a time as eight 16-lane chains (each column is one chain of
// fused multiply-adds, row after row, so its latency bounds a row: eight
// chains of 16 lanes keep two FMA ports busy where a 64-column head has only
// four). The remaining columns go to the AVX2 table's axpy_rows (its 8-lane
// chains are as fast there and do not pay for 512-bit conversions on CPUs
// that split them). Columns are independent, so every column gets
// axpy_rows_avx2's bits.
template <typename T>
void axpy_rows_avx512(float* y, const float* w, const T* v, size_t stride, size_t rows, size_t n) {
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m512 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm512_loadu_ps(y + i + 16 * c);
    const T* row = v + i;
    for (size_t r = 0; r < rows; ++r, row += stride) {
      const __m512 a = _mm512_set1_ps(w[r]);
      for (int c = 0; c < 8; ++c) acc[c] = _mm512_fmadd_ps(a, load16(row, 16 * c, 0xffff), acc[c]);
    }
    for (int c = 0; c < 8; ++c) _mm512_storeu_ps(y + i + 16 * c, acc[c]);
  }
  if (i < n) rest_of_axpy_rows(y + i, w, v + i, stride, rows, n - i);
}

// Two queries at a time over 64-column blocks: 2 x 4 sixteen-lane chains
// (one query's 64-column head has four, half what two FMA units with a
// 4-cycle latency need). Each column of each query is still one chain of
// fused multiply-adds in row order, so the bits are axpy_rows_avx2's; the
// columns after the 64-wide blocks and an odd query go to axpy_rows_avx512.
void axpy_rows_f32_avx512(float* const* y, const float* const* w, size_t n_y, const float* v, size_t stride,
                          size_t rows, size_t n) {
  const size_t wide = n / 64 * 64;
  size_t j = 0;
  for (; j + 2 <= n_y && wide != 0; j += 2) {
    float* ya = y[j];
    float* yb = y[j + 1];
    const float* wa = w[j];
    const float* wb = w[j + 1];
    for (size_t i = 0; i < wide; i += 64) {
      __m512 a[4], b[4];
      for (int c = 0; c < 4; ++c) {
        a[c] = _mm512_loadu_ps(ya + i + 16 * c);
        b[c] = _mm512_loadu_ps(yb + i + 16 * c);
      }
      const float* row = v + i;
      for (size_t r = 0; r < rows; ++r, row += stride) {
        const __m512 fa = _mm512_set1_ps(wa[r]);
        const __m512 fb = _mm512_set1_ps(wb[r]);
        for (int c = 0; c < 4; ++c) {
          const __m512 x = _mm512_loadu_ps(row + 16 * c);
          a[c] = _mm512_fmadd_ps(fa, x, a[c]);
          b[c] = _mm512_fmadd_ps(fb, x, b[c]);
        }
      }
      for (int c = 0; c < 4; ++c) {
        _mm512_storeu_ps(ya + i + 16 * c, a[c]);
        _mm512_storeu_ps(yb + i + 16 * c, b[c]);
      }
    }
    if (wide < n) {
      axpy_rows_avx512(ya + wide, wa, v + wide, stride, rows, n - wide);
      axpy_rows_avx512(yb + wide, wb, v + wide, stride, rows, n - wide);
    }
  }
  for (; j < n_y; ++j) axpy_rows_avx512(y[j], w[j], v, stride, rows, n);
}

// vec_f16_avx2.cpp's exp_nonpositive on sixteen lanes: the same operations
// lane by lane (round to nearest, the split ln2, the Cephes polynomial, 2^k
// in the exponent, 0 below -87.3, NaN kept), so the same bits per element.
inline __m512 exp_nonpositive16(__m512 x) {
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  const __m512 e = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_mov_ps(_mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny), e), nan, x);
}

// softmax_avx2's bits, sixteen exponentials at a time. Its sum keeps eight
// lanes (element i in lane i % 8, added in index order): each sixteen
// exponentials are added as their low eight, then their high eight, which is
// the AVX2 loop's two steps; masked-off elements add 0 as its tail does. The
// maximum is the same value in any order (the sign of a zero maximum can
// differ, which changes no x - max).
void softmax_avx512(float* x, size_t n) {
  if (n == 0) return;
  const size_t wide = n / 16 * 16;
  const __mmask16 tail = first_lanes(n - wide);
  __m512 mv = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  // max_ps(v, m) keeps m when v is NaN: NaN never becomes the maximum.
  for (size_t i = 0; i < wide; i += 16) mv = _mm512_max_ps(_mm512_loadu_ps(x + i), mv);
  if (wide < n) mv = _mm512_max_ps(_mm512_mask_loadu_ps(mv, tail, x + wide), mv);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, mv);
  float max_score = lanes[0];
  for (int j = 1; j < 16; ++j) max_score = lanes[j] > max_score ? lanes[j] : max_score;
  const __m512 m = _mm512_set1_ps(max_score);
  __m256 sum = _mm256_setzero_ps();
  for (size_t i = 0; i < wide; i += 16) {
    const __m512 e = exp_nonpositive16(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
    _mm512_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
    sum = _mm256_add_ps(sum, _mm512_extractf32x8_ps(e, 1));
  }
  if (wide < n) {
    const __m512 e = _mm512_maskz_mov_ps(tail, exp_nonpositive16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + wide), m)));
    _mm512_mask_storeu_ps(x + wide, tail, e);
    sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
    if (n - wide > 8) sum = _mm256_add_ps(sum, _mm512_extractf32x8_ps(e, 1));
  }
  _mm256_store_ps(lanes, sum);
  const float total = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  const __m512 inv = _mm512_set1_ps(1.0f / total);
  for (size_t i = 0; i < wide; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
  if (wide < n) _mm512_mask_storeu_ps(x + wide, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + wide), inv));
}

}  // namespace

const F16VecOps& avx512_f16_vec_ops() {
  static const F16VecOps ops{"avx512",
                             to_f32_avx512,
                             to_f16_avx512,
                             dot_avx512,
                             axpy_avx512,
                             dot_rows_avx512<uint16_t>,
                             axpy_rows_avx512<uint16_t>,
                             dot_rows_avx512<float>,
                             axpy_rows_f32_avx512,
                             softmax_avx512};
  return ops;
}

}  // namespace muser::cpu
