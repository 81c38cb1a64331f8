// The arm64 kernel table for Advanced SIMD + SDOT + the SMMLA int8 matrix multiply (FEAT_I8MM), compiled with +dotprod+i8mm. Compiled with those extensions (see
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

constexpr KernelSet kSet = make_neon_set(Isa::NeonI8mm);

}  // namespace

const KernelSet& neon_i8mm_kernel_set() { return kSet; }

}  // namespace muser::cpu
