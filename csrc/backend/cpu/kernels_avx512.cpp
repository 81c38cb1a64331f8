// The AVX-512 F/BW/VL/DQ kernel table. Compiled with those
// extensions (see CMakeLists.txt) and reached only through kernel_set() after
// the run-time check in isa.cpp.
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
#include "backend/cpu/x86_kernels_512.inc"
#include "backend/cpu/x86_kernels_256_packed.inc"

constexpr KernelSet make_avx512_without_vnni_set() {
  KernelSet set = make_avx512_set(Isa::Avx512);
  set_packed256_kernels(set);
  return set;
}

constexpr KernelSet kSet = make_avx512_without_vnni_set();

}  // namespace

const KernelSet& avx512_kernel_set() { return kSet; }

}  // namespace muser::cpu
