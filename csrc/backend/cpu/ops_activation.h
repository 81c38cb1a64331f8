// Element-wise activations of the feed-forward block and logit soft-capping.
#pragma once

#include <cstddef>

namespace muser::cpu {

// gate[i] = silu(gate[i]) * up[i]   (SwiGLU)
void swiglu(float* gate, const float* up, size_t n);

// gate[i] = gelu_tanh(gate[i]) * up[i]   (GeGLU, tanh approximation of GELU)
void geglu(float* gate, const float* up, size_t n);

// x[i] = cap * tanh(x[i] / cap)
void softcap(float* x, size_t n, float cap);

// y[i] += x[i]
void add_to(float* y, const float* x, size_t n);

}  // namespace muser::cpu
