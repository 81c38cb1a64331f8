// RMSNorm on one float32 row. Deterministic: the sum of squares is
// accumulated in double, in index order, whatever the batch.
#pragma once

#include <cstddef>

namespace muser::cpu {

// out[i] = (x[i] / sqrt(mean(x^2) + eps)) * w[i]; out may alias x.
void rms_norm(const float* x, const float* w, size_t n, float eps, float* out);

}  // namespace muser::cpu
