// One row of an ActivationView as the matvec kernels read it (the pointers
// of row r), shared by the decode and prefill matvec kernels.
#pragma once

#include "backend/cuda/weight_units.cuh"

namespace muser::cuda {

__device__ __forceinline__ ActRow act_row(const ActivationView& x, size_t r) {
  ActRow a;
  const size_t k = x.k;
  a.q = x.q != nullptr ? reinterpret_cast<const int*>(x.q + r * k) : nullptr;
  a.f = x.f != nullptr ? x.f + r * k : nullptr;
  switch (x.format) {
    case ActivationFormat::Q8_K:
      a.d = x.d + r * (k / 256);
      a.s = nullptr;
      a.bsum = x.bsum + r * (k / 16);
      break;
    case ActivationFormat::Q8_1:
      a.d = x.d + r * (k / 32);
      a.s = x.s + r * (k / 32);
      a.bsum = nullptr;
      break;
    default:
      a.d = x.d != nullptr ? x.d + r * (k / 32) : nullptr;
      a.s = nullptr;
      a.bsum = nullptr;
      break;
  }
  return a;
}

}  // namespace muser::cuda
