// Rotary position embedding on float32 head vectors.
#pragma once

#include <cstddef>
#include <vector>

#include "graph/ops.h"

namespace muser::cpu {

// The rotation angles of one RoPE configuration (base, linear position
// scale, optional per-pair frequency divisors) for n_rot dimensions:
// angle_i(p) = p * scale * base^(-2i / n_rot) / divisor_i.
// Angles, cosines and sines are computed in double and rounded once, so a
// position's table is the same whichever batch it appears in.
class RopeFrequencies {
 public:
  // divisors: n_rot / 2 floats, or empty for none.
  RopeFrequencies(double base, double position_scale, size_t n_rot, const std::vector<float>& divisors);

  size_t n_pairs() const { return inv_freq_.size(); }
  bool same_as(double base, double position_scale) const {
    return base == base_ && position_scale == position_scale_;
  }
  // cos_out / sin_out: n_pairs() floats each, for `position`.
  void angles(size_t position, float* cos_out, float* sin_out) const;

 private:
  double base_;
  double position_scale_;
  std::vector<double> inv_freq_;
};

// Rotates the first n_rot dimensions of each of n_heads heads (head_dim
// apart) in place; the rest pass through. cos/sin: n_rot/2 floats.
void rope_heads(float* x, size_t n_heads, size_t head_dim, size_t n_rot, RopeStyle style,
                const float* cos, const float* sin);

}  // namespace muser::cpu
