// The AVX2 + FMA + F16C kernel table. Compiled with those extensions (see
// CMakeLists.txt) and reached only through kernel_set() after the run-time
// check in isa.cpp.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "backend/cpu/kernel_set.h"
#include "tensor/half_float.h"
#include "tensor/quant_blocks.h"

namespace muser::cpu {
namespace {

#include "backend/cpu/x86_kernels_256.inc"
#include "backend/cpu/x86_kernels_256_packed.inc"

constexpr KernelSet make_avx2_set() {
  KernelSet set{Isa::Avx2, {}, {}, {}};
  set_quantizers(set);
  set_packed256_kernels(set);
  set.tile[0] = tile_rows<FloatKernel256<FloatF32>>;    // F32
  set.tile[1] = tile_rows<FloatKernel256<FloatF16>>;    // F16
  set.tile[30] = tile_rows<FloatKernel256<FloatBF16>>;  // BF16
  set.tile[2] = tile_rows<Q32Kernel<WeightQ4_0>>;
  set.tile[3] = tile_rows<Q32Kernel<WeightQ4_1>>;
  set.tile[6] = tile_rows<Q32Kernel<WeightQ5_0>>;
  set.tile[7] = tile_rows<Q32Kernel<WeightQ5_1>>;
  set.tile[8] = tile_rows<Q32Kernel<WeightQ8_0>>;
  set.tile[10] = tile_rows<KernelQ2_K>;
  set.tile[11] = tile_rows<KernelQ3_K>;
  set.tile[12] = tile_rows<KernelK4<BlockQ4_K, false>>;
  set.tile[13] = tile_rows<KernelK4<BlockQ5_K, true>>;
  set.tile[14] = tile_rows<KernelQ6_K>;
  return set;
}

constexpr KernelSet kAvx2Set = make_avx2_set();

}  // namespace

const KernelSet& avx2_kernel_set() { return kAvx2Set; }

}  // namespace muser::cpu
