// Run-time instruction-set detection and the choice of kernel table. The
// library is compiled for baseline x86-64 (or arm64); only the files named
// *_avx2.cpp / *_avx512.cpp / *_avx512vnni.cpp use wider instructions, and
// they are reached only through the tables returned here after the CPU said
// it runs them. Detection runs once (function-local statics); the tables are
// constant data, so nothing here changes after first use.
#include <cstring>
#include <string>

#include "backend/cpu/kernel_set.h"
#include "core/error.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define MUSER_X86_DISPATCH 1
#include <cpuid.h>
#else
#define MUSER_X86_DISPATCH 0
#endif

namespace muser::cpu {
namespace {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512 = false;
  bool avx512vnni = false;
};

CpuFeatures detect_features() {
  CpuFeatures f;
#if MUSER_X86_DISPATCH
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the wide registers.
  // F16C straight from CPUID (leaf 1, ECX bit 29): clang before 17 does not
  // accept "f16c" in __builtin_cpu_supports. It needs no extra OS state
  // beyond the AVX registers the "avx2" check already covers.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
#endif
  return f;
}

const CpuFeatures& features() {
  static const CpuFeatures detected = detect_features();
  return detected;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vnni: return "avx512vnni";
  }
  return "unknown";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return features().avx2;
    case Isa::Avx512: return features().avx512;
    case Isa::Avx512Vnni: return features().avx512vnni;
  }
  return false;
}

Isa best_isa() {
  static const Isa best = isa_supported(Isa::Avx512Vnni) ? Isa::Avx512Vnni
                          : isa_supported(Isa::Avx512) ? Isa::Avx512
                          : isa_supported(Isa::Avx2) ? Isa::Avx2
                                                     : Isa::Scalar;
  return best;
}

const KernelSet& kernel_set(Isa isa) {
  if (!isa_supported(isa)) {
    throw InvalidArgument(format_where(
        "cpu", std::string("instruction set '") + isa_name(isa) + "' is not supported by this CPU"));
  }
  switch (isa) {
    case Isa::Scalar: return scalar_kernel_set();
#if MUSER_X86_DISPATCH
    case Isa::Avx2: return avx2_kernel_set();
    case Isa::Avx512: return avx512_kernel_set();
    case Isa::Avx512Vnni: return avx512vnni_kernel_set();
#else
    default: break;
#endif
  }
  throw InternalError("[cpu] no kernel table for a supported instruction set");
}

Isa parse_isa(const char* name) {
  Isa isa;
  if (std::strcmp(name, "best") == 0) {
    isa = best_isa();
  } else if (std::strcmp(name, "scalar") == 0) {
    isa = Isa::Scalar;
  } else if (std::strcmp(name, "avx2") == 0) {
    isa = Isa::Avx2;
  } else if (std::strcmp(name, "avx512") == 0) {
    isa = Isa::Avx512;
  } else if (std::strcmp(name, "avx512vnni") == 0) {
    isa = Isa::Avx512Vnni;
  } else {
    throw InvalidArgument(format_where(
        "cpu", std::string("unknown instruction set: expected scalar, avx2, avx512, avx512vnni or best, got '") +
                   name + "'"));
  }
  if (!isa_supported(isa)) {
    throw InvalidArgument(format_where(
        "cpu", std::string("instruction set '") + name + "' is not supported by this CPU"));
  }
  return isa;
}

}  // namespace muser::cpu
