// RMSNorm on one float32 row. Deterministic: the sum of squares is
// accumulated in double, in index order, whatever the batch.
#pragma once

#include <cstddef>

namespace muser::cpu {

// out[i] = (x[i] / sqrt(mean(x^2) + eps)) * w[i]; out may alias x.
void rms_norm(const float* x, const float* w, size_t n, float eps, float* out);

// rms_norm of `rows` rows (row r at x + r * x_stride, written to
// out + r * out_stride), each bitwise rms_norm of that row alone; several
// rows' sums run side by side. out may alias x (same strides).
void rms_norm_rows(const float* x, size_t x_stride, const float* w, size_t n, float eps, float* out,
                   size_t out_stride, size_t rows);

}  // namespace muser::cpu
