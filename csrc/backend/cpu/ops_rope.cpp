#include "backend/cpu/ops_rope.h"

#include <cmath>

namespace muser::cpu {

RopeFrequencies::RopeFrequencies(double base, double position_scale, size_t n_rot,
                                 const std::vector<float>& divisors)
    : base_(base), position_scale_(position_scale), inv_freq_(n_rot / 2) {
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    inv_freq_[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    if (!divisors.empty()) inv_freq_[i] /= static_cast<double>(divisors[i]);
  }
}

void RopeFrequencies::angles(size_t position, float* cos_out, float* sin_out) const {
  const double p = static_cast<double>(position) * position_scale_;
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double theta = p * inv_freq_[i];
    cos_out[i] = static_cast<float>(std::cos(theta));
    sin_out[i] = static_cast<float>(std::sin(theta));
  }
}

void rope_heads(float* x, size_t n_heads, size_t head_dim, size_t n_rot, RopeStyle style,
                const float* cos, const float* sin) {
  const size_t half = n_rot / 2;
  for (size_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_dim;
    for (size_t i = 0; i < half; ++i) {
      // Normal pairs neighbours; NEOX pairs dimension i with i + n_rot/2.
      float* a = style == RopeStyle::Normal ? head + 2 * i : head + i;
      float* b = style == RopeStyle::Normal ? head + 2 * i + 1 : head + i + half;
      const float x0 = *a;
      const float x1 = *b;
      *a = x0 * cos[i] - x1 * sin[i];
      *b = x0 * sin[i] + x1 * cos[i];
    }
  }
}

}  // namespace muser::cpu
