#include "backend/cpu/ops_norm.h"

#include <cmath>

namespace muser::cpu {

void rms_norm(const float* x, const float* w, size_t n, float eps, float* out) {
  double sum_sq = 0.0;
  for (size_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float mean = static_cast<float>(sum_sq / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (size_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
}

}  // namespace muser::cpu
