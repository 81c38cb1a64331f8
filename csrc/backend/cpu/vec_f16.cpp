#include "backend/cpu/vec_f16.h"

#include <cmath>
#include <limits>

#include "backend/cpu/kernel_set.h"
#include "tensor/half_float.h"

namespace muser::cpu {

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
// Defined in vec_f16_avx2.cpp (compiled with AVX2/FMA/F16C) and
// vec_f16_avx512.cpp (AVX-512 F/BW/VL/DQ).
const F16VecOps& avx2_f16_vec_ops();
const F16VecOps& avx512_f16_vec_ops();
#endif

namespace {

void to_f32_scalar(const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void to_f16_scalar(const float* x, uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

// Eight interleaved partial sums combined pairwise at the end.
float dot_scalar(const float* x, const float* y, size_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) acc[j] += x[i + j] * y[i + j];
  }
  for (size_t j = 0; i < n; ++i, ++j) acc[j] += x[i] * y[i];
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

void axpy_scalar(float* y, float a, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

inline float value(uint16_t x) { return fp16_to_fp32(x); }
inline float value(float x) { return x; }

// dot_scalar's sums with y converted element by element (T = uint16_t) or
// already converted (T = float): the same values, so the same bits.
template <typename T>
void dot_rows_scalar(const float* q, const T* k, size_t stride, size_t rows, size_t n, float scale,
                     float* scores) {
  for (size_t r = 0; r < rows; ++r, k += stride) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (size_t j = 0; j < 8; ++j) acc[j] += q[i + j] * value(k[i + j]);
    }
    for (size_t j = 0; i < n; ++i, ++j) acc[j] += q[i] * value(k[i]);
    scores[r] = (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))) * scale;
  }
}

template <typename T>
void axpy_rows_scalar(float* y, const float* w, const T* v, size_t stride, size_t rows, size_t n) {
  for (size_t r = 0; r < rows; ++r, v += stride) {
    const float a = w[r];
    for (size_t i = 0; i < n; ++i) y[i] += a * value(v[i]);
  }
}

void axpy_rows_f32_scalar(float* const* y, const float* const* w, size_t n_y, const float* v, size_t stride,
                          size_t rows, size_t n) {
  for (size_t j = 0; j < n_y; ++j) axpy_rows_scalar(y[j], w[j], v, stride, rows, n);
}

void softmax_scalar(float* x, size_t n) {
  float max_score = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) max_score = x[i] > max_score ? x[i] : max_score;
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_score);
    sum += x[i];
  }
  // One division, then products: the weights' scale costs no division per element.
  const float inv_sum = 1.0f / sum;
  for (size_t i = 0; i < n; ++i) x[i] *= inv_sum;
}

}  // namespace

std::vector<const F16VecOps*> supported_f16_vec_ops() {
  std::vector<const F16VecOps*> tables{&scalar_f16_vec_ops()};
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  if (isa_supported(Isa::Avx2)) tables.push_back(&avx2_f16_vec_ops());
  if (isa_supported(Isa::Avx512)) tables.push_back(&avx512_f16_vec_ops());
#endif
  return tables;
}

const F16VecOps& scalar_f16_vec_ops() {
  static const F16VecOps ops{"scalar",
                             to_f32_scalar,
                             to_f16_scalar,
                             dot_scalar,
                             axpy_scalar,
                             dot_rows_scalar<uint16_t>,
                             axpy_rows_scalar<uint16_t>,
                             dot_rows_scalar<float>,
                             axpy_rows_f32_scalar,
                             softmax_scalar};
  return ops;
}

const F16VecOps& f16_vec_ops() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  // The one CPU probe (isa.cpp): its AVX2 level includes FMA and F16C, its
  // AVX-512 level F/BW/VL/DQ. Where 512-bit operations run as two halves
  // (Zen 4) the AVX-512 table was slower than the AVX2 one (dot_rows 4-15%
  // in isolation, a 512-token smollm2 prefill 7-16% on the EPYC guest), so
  // such CPUs keep the AVX2 table. Either way one machine always uses one
  // table, so no result depends on threads, batch or splits.
  static const F16VecOps& best =
      isa_supported(Isa::Avx512) && !splits_512bit_ops() ? avx512_f16_vec_ops()
      : isa_supported(Isa::Avx2)                         ? avx2_f16_vec_ops()
                                                         : scalar_f16_vec_ops();
  return best;
#else
  return scalar_f16_vec_ops();
#endif
}

}  // namespace muser::cpu
