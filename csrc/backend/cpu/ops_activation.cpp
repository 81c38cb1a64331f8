#include "backend/cpu/ops_activation.h"

#include <cmath>

namespace muser::cpu {

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
// Defined in ops_activation_avx2.cpp (compiled with AVX2/FMA).
const ActivationOps& avx2_activation_ops();
#endif

namespace {

void swiglu_scalar(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void geglu_scalar(float* gate, const float* up, size_t n) {
  // -2 sqrt(2 / pi) and the cubic coefficient of the tanh approximation.
  constexpr float kMinusTwoSqrt2OverPi = -1.5957691216057308f;
  constexpr float kCubic = 0.044715f;
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(kMinusTwoSqrt2OverPi * g * (1.0f + kCubic * g * g))) * up[i];
  }
}

}  // namespace

const ActivationOps& scalar_activation_ops() {
  static const ActivationOps ops{"scalar", swiglu_scalar, geglu_scalar};
  return ops;
}

const ActivationOps& activation_ops() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  static const ActivationOps& best = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                                         ? avx2_activation_ops()
                                         : scalar_activation_ops();
  return best;
#else
  return scalar_activation_ops();
#endif
}

void softcap(float* x, size_t n, float cap) {
  for (size_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void add_to(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace muser::cpu
