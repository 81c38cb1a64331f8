// Element-wise activations of the feed-forward block and logit soft-capping.
// The gated activations have an AVX2 version chosen once per process; each
// is a fixed function of its input, so rows never depend on their batch.
#pragma once

#include <cstddef>

namespace muser::cpu {

struct ActivationOps {
  const char* isa;
  // gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i]   (SwiGLU)
  void (*swiglu)(float* gate, const float* up, size_t n);
  // gate[i] = gelu_tanh(gate[i]) * up[i]   (GeGLU), using
  // 0.5 g (1 + tanh(u)) = g / (1 + exp(-2u)), u = sqrt(2/pi) (g + 0.044715 g^3)
  void (*geglu)(float* gate, const float* up, size_t n);
};

const ActivationOps& scalar_activation_ops();
const ActivationOps& activation_ops();

// x[i] = cap * tanh(x[i] / cap)
void softcap(float* x, size_t n, float cap);

// y[i] += x[i]
void add_to(float* y, const float* x, size_t n);

}  // namespace muser::cpu
