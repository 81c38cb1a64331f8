// Vector primitives between float32 and f16 (IEEE binary16) rows: what the
// attention over the f16 KV cache is built from. One implementation per
// instruction set, picked once per process; each keeps a fixed reduction
// order that depends only on n, so a row's result never depends on the batch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace muser::cpu {

struct F16VecOps {
  const char* isa;
  // sum_i x[i] * f32(y[i])
  float (*dot)(const float* x, const uint16_t* y, size_t n);
  // y[i] += a * f32(x[i])
  void (*axpy)(float* y, float a, const uint16_t* x, size_t n);
  // y[i] = f16(x[i]), round to nearest even
  void (*to_f16)(const float* x, uint16_t* y, size_t n);
};

const F16VecOps& scalar_f16_vec_ops();
// The fastest table this CPU runs, decided once per process.
const F16VecOps& f16_vec_ops();

}  // namespace muser::cpu
