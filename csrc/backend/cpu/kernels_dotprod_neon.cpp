// The arm64 kernel table for Advanced SIMD + the SDOT int8 dot product (FEAT_DotProd), compiled with +dotprod. Compiled with those extensions (see
// CMakeLists.txt) and reached only through kernel_set() after the run-time
// check in isa.cpp.
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/kernel_set.h"
#include "tensor/half_float.h"
#include "tensor/quant_blocks.h"
#include "tensor/reference_kernels.h"

namespace muser::cpu {
namespace {

#include "backend/cpu/arm_kernels_neon.inc"

constexpr KernelSet kSet = make_neon_set(Isa::NeonDotprod);

}  // namespace

const KernelSet& neon_dotprod_kernel_set() { return kSet; }

}  // namespace muser::cpu
