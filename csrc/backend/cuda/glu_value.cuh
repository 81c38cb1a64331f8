// The gated activation of one element, shared by the glu kernel and the
// gate/up matvec that applies it in its epilogue, so both write the same
// bits from the same gate and up values.
#pragma once

#include "backend/cuda/cuda_ops.h"

namespace muser::cuda {

// act(g) * u, act the Glu `kind` (Glu::Silu or Glu::GeluTanh as an int).
__device__ __forceinline__ float glu_value(int kind, float g, float u) {
  if (kind == static_cast<int>(Glu::Silu)) return g / (1.0f + expf(-g)) * u;
  // gelu, tanh form: g * sigmoid(2 sqrt(2/pi) (g + 0.044715 g^3)).
  constexpr float kMinusTwoSqrt2OverPi = -1.5957691216057308f;
  constexpr float kCubic = 0.044715f;
  return g / (1.0f + expf(kMinusTwoSqrt2OverPi * g * (1.0f + kCubic * g * g))) * u;
}

}  // namespace muser::cuda
