// The portable kernel table: every tile entry loops over the scalar reference
// dot product, so it is correct on any CPU and is the fallback where no SIMD
// table applies.
#include "backend/cpu/kernel_set.h"
#include "tensor/dtype.h"
#include "tensor/reference_kernels.h"

namespace muser::cpu {
namespace {

template <DType T>
void scalar_tile(size_t n, const uint8_t* w, size_t w_row_bytes, size_t n_w_rows,
                 const uint8_t* act, size_t act_row_bytes, size_t n_act_rows, float* y,
                 size_t y_stride) {
  for (size_t o = 0; o < n_w_rows; ++o) {
    for (size_t r = 0; r < n_act_rows; ++r) {
      y[r * y_stride + o] = ref::vec_dot(T, n, w + o * w_row_bytes, act + r * act_row_bytes);
    }
  }
}

// The SIMD tables index quantizers by these values.
static_assert(static_cast<uint32_t>(ActivationFormat::F32) == 0 &&
                  static_cast<uint32_t>(ActivationFormat::Q8_0) == 1 &&
                  static_cast<uint32_t>(ActivationFormat::Q8_1) == 2 &&
                  static_cast<uint32_t>(ActivationFormat::Q8_K) == 3,
              "KernelSet::quantize is indexed by ActivationFormat");

template <ActivationFormat F>
void scalar_quantize(const float* x, uint8_t* dst, size_t n) {
  ref::quantize_activation_row(F, x, dst, n);
}

constexpr KernelSet make_scalar_set() {
  KernelSet set{Isa::Scalar, {}, {}, {}};
  set.quantize[static_cast<uint32_t>(ActivationFormat::F32)] = scalar_quantize<ActivationFormat::F32>;
  set.quantize[static_cast<uint32_t>(ActivationFormat::Q8_0)] = scalar_quantize<ActivationFormat::Q8_0>;
  set.quantize[static_cast<uint32_t>(ActivationFormat::Q8_1)] = scalar_quantize<ActivationFormat::Q8_1>;
  set.quantize[static_cast<uint32_t>(ActivationFormat::Q8_K)] = scalar_quantize<ActivationFormat::Q8_K>;
  set.tile[static_cast<uint32_t>(DType::F32)] = scalar_tile<DType::F32>;
  set.tile[static_cast<uint32_t>(DType::F16)] = scalar_tile<DType::F16>;
  set.tile[static_cast<uint32_t>(DType::BF16)] = scalar_tile<DType::BF16>;
  set.tile[static_cast<uint32_t>(DType::Q4_0)] = scalar_tile<DType::Q4_0>;
  set.tile[static_cast<uint32_t>(DType::Q4_1)] = scalar_tile<DType::Q4_1>;
  set.tile[static_cast<uint32_t>(DType::Q5_0)] = scalar_tile<DType::Q5_0>;
  set.tile[static_cast<uint32_t>(DType::Q5_1)] = scalar_tile<DType::Q5_1>;
  set.tile[static_cast<uint32_t>(DType::Q8_0)] = scalar_tile<DType::Q8_0>;
  set.tile[static_cast<uint32_t>(DType::Q2_K)] = scalar_tile<DType::Q2_K>;
  set.tile[static_cast<uint32_t>(DType::Q3_K)] = scalar_tile<DType::Q3_K>;
  set.tile[static_cast<uint32_t>(DType::Q4_K)] = scalar_tile<DType::Q4_K>;
  set.tile[static_cast<uint32_t>(DType::Q5_K)] = scalar_tile<DType::Q5_K>;
  set.tile[static_cast<uint32_t>(DType::Q6_K)] = scalar_tile<DType::Q6_K>;
  return set;
}

constexpr KernelSet kScalarSet = make_scalar_set();

}  // namespace

const KernelSet& scalar_kernel_set() { return kScalarSet; }

}  // namespace muser::cpu
