#include "backend/cpu/ops_norm.h"

#include <cmath>

namespace muser::cpu {

void rms_norm(const float* x, const float* w, size_t n, float eps, float* out) {
  rms_norm_rows(x, n, w, n, eps, out, n, 1);
}

void rms_norm_rows(const float* x, size_t x_stride, const float* w, size_t n, float eps, float* out,
                   size_t out_stride, size_t rows) {
  // Each row's sum of squares is one chain of dependent double additions
  // (index order, the contract above): alone it waits on the adder's latency
  // at every element. Four rows' chains side by side keep the adder busy;
  // each row still sees exactly its own additions in its own order.
  // (Named accumulators: an array of them was kept in memory, adding a
  // store-to-load round trip to every step of the chains.)
  constexpr size_t kRows = 4;
  size_t r = 0;
  for (; r + kRows <= rows; r += kRows) {
    const float* x0 = x + r * x_stride;
    const float* x1 = x0 + x_stride;
    const float* x2 = x1 + x_stride;
    const float* x3 = x2 + x_stride;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double v0 = x0[i], v1 = x1[i], v2 = x2[i], v3 = x3[i];
      s0 += v0 * v0;
      s1 += v1 * v1;
      s2 += v2 * v2;
      s3 += v3 * v3;
    }
    const double sum_sq[kRows] = {s0, s1, s2, s3};
    for (size_t j = 0; j < kRows; ++j) {
      const float mean = static_cast<float>(sum_sq[j] / static_cast<double>(n));
      const float scale = 1.0f / std::sqrt(mean + eps);
      const float* xr = x + (r + j) * x_stride;
      float* o = out + (r + j) * out_stride;
      for (size_t i = 0; i < n; ++i) o[i] = (xr[i] * scale) * w[i];
    }
  }
  for (; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    double sum_sq = 0.0;
    for (size_t i = 0; i < n; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float mean = static_cast<float>(sum_sq / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    float* o = out + r * out_stride;
    for (size_t i = 0; i < n; ++i) o[i] = (xr[i] * scale) * w[i];
  }
}

}  // namespace muser::cpu
