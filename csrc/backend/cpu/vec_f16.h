// Vector primitives for the attention over the f16 KV cache. One
// implementation per instruction set, picked once per process. Each keeps a
// reduction order that depends only on n, so a row's result never depends on
// the batch it came in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace muser::cpu {

struct F16VecOps {
  const char* isa;
  // y[i] = f32(x[i]) (exact)
  void (*to_f32)(const uint16_t* x, float* y, size_t n);
  // y[i] = f16(x[i]), round to nearest even
  void (*to_f16)(const float* x, uint16_t* y, size_t n);
  // sum_i x[i] * y[i], in an order fixed by n (and the instruction set)
  float (*dot)(const float* x, const float* y, size_t n);
  // y[i] += a * x[i]
  void (*axpy)(float* y, float a, const float* x, size_t n);
  // scores[r] = dot(q, f32(k + r * stride), n) * scale for r < rows: the
  // bits to_f32 then dot give, without the float32 copy or a call per row
  // (attention's inner loop over a run of cached keys).
  void (*dot_rows)(const float* q, const uint16_t* k, size_t stride, size_t rows, size_t n, float scale,
                   float* scores);
  // axpy(y, w[r], f32(v + r * stride), n) for r = 0, 1, ..., rows - 1 in
  // turn, bitwise, with y held in registers across the rows.
  void (*axpy_rows)(float* y, const float* w, const uint16_t* v, size_t stride, size_t rows, size_t n);
  // dot_rows and axpy_rows over rows already converted to float32 (to_f32):
  // the same bits. Attention converts a chunk of cache rows once when many
  // queries read it (a prefill block) instead of once per query; the
  // conversion is as much work as the multiply-adds on 512-bit units.
  void (*dot_rows_f32)(const float* q, const float* k, size_t stride, size_t rows, size_t n, float scale,
                       float* scores);
  // For each j < n_y: axpy_rows(y[j], w[j], v rows) bitwise, the n_y
  // queries sharing each row as it is read (more independent chains where
  // one query's columns are too few to hide the multiply-add latency).
  void (*axpy_rows_f32)(float* const* y, const float* const* w, size_t n_y, const float* v, size_t stride,
                        size_t rows, size_t n);
  // x = softmax(x) in place: exp(x[i] - max) / sum, the sum in an order
  // fixed by n (and the instruction set). NaN stays NaN.
  void (*softmax)(float* x, size_t n);
};

const F16VecOps& scalar_f16_vec_ops();
// Every table this CPU runs, slowest first (tests compare them).
std::vector<const F16VecOps*> supported_f16_vec_ops();
// The fastest table this CPU runs, decided once per process.
const F16VecOps& f16_vec_ops();

}  // namespace muser::cpu
