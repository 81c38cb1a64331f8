// Run-time instruction-set detection and the choice of kernel table. The
// library is compiled for baseline x86-64 (or arm64); only the files named
// *_avx2.cpp / *_avx512.cpp / *_avx512vnni.cpp / *_avx512amx.cpp (x86) and *_dotprod_neon.cpp /
// *_i8mm_neon.cpp (arm64) use wider instructions, and they are reached only
// through the tables returned here after the CPU said it runs them.
// Detection runs once (function-local statics); the tables are constant
// data, so nothing here changes after first use.
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cpu/kernel_set.h"
#include "core/env_switch.h"
#include "core/error.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define MUSER_X86_DISPATCH 1
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#endif
#else
#define MUSER_X86_DISPATCH 0
#endif

#if defined(__aarch64__)
#define MUSER_ARM64_DISPATCH 1
#if defined(__linux__)
#include <sys/auxv.h>
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#endif
#else
#define MUSER_ARM64_DISPATCH 0
#endif

namespace muser::cpu {
namespace {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512 = false;
  bool avx512vnni = false;
  bool amx = false;
  bool neon = false;
  bool dotprod = false;
  bool i8mm = false;
};

#if MUSER_ARM64_DISPATCH && defined(__APPLE__)
bool sysctl_flag(const char* name) {
  int value = 0;
  size_t size = sizeof value;
  return sysctlbyname(name, &value, &size, nullptr, 0) == 0 && value != 0;
}
#endif

#if MUSER_X86_DISPATCH && defined(__linux__)
// Whether this process may use the AMX int8 tiles. The CPU must report
// AMX-TILE and AMX-INT8 (CPUID 7.0 EDX bits 24, 25) and the OS must manage
// the tile state (XCR0 bits 17, 18); then the kernel must grant the process
// that state (Linux 5.16+: arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA), and a tile instruction must run: some virtual machines
// pass all of that and still fault (llama.cpp died with SIGILL on tilezero on
// such a guest), so a child process tries one first, and only a clean exit
// lets the kernels use AMX. MUSER_CPU_AMX=0 in the environment turns AMX off.
bool amx_usable(bool avx512vnni) {
  if (!avx512vnni) return false;
  if (env_is("MUSER_CPU_AMX", "0")) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  if ((edx & (1u << 24)) == 0 || (edx & (1u << 25)) == 0) return false;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) return false;  // OSXSAVE
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if ((xcr0_low & (3u << 17)) != (3u << 17)) return false;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  // A bare clone (fork without the atfork handlers other libraries in the
  // process registered): the child only runs the tiles and exits.
  const long child = syscall(SYS_clone, static_cast<long>(SIGCHLD), 0L, 0L, 0L, 0L);
  if (child < 0) return false;
  if (child == 0) {
    // A fault must end the child quietly: handlers the process installed
    // (Python's faulthandler) would print a crash report for it.
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigaction(SIGILL, &default_action, nullptr);
    amx_tiles_run();
    syscall(SYS_exit_group, 0L);
  }
  int status = 0;
  while (waitpid(static_cast<pid_t>(child), &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
#endif

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
#if defined(__linux__)
  f.amx = amx_usable(f.avx512vnni);
#endif
#endif
#if MUSER_ARM64_DISPATCH
  f.neon = true;  // Advanced SIMD is part of the arm64 base architecture
#if defined(__linux__)
  // The kernel reports what user space may execute (bits from the arm64
  // hwcap ABI, spelled out so old headers build too).
  constexpr unsigned long kHwcapAsimdDp = 1ul << 20;   // HWCAP_ASIMDDP
  constexpr unsigned long kHwcap2I8mm = 1ul << 13;     // HWCAP2_I8MM
  f.dotprod = (getauxval(AT_HWCAP) & kHwcapAsimdDp) != 0;
  f.i8mm = f.dotprod && (getauxval(AT_HWCAP2) & kHwcap2I8mm) != 0;
#elif defined(__APPLE__)
  f.dotprod = sysctl_flag("hw.optional.arm.FEAT_DotProd");
  f.i8mm = f.dotprod && sysctl_flag("hw.optional.arm.FEAT_I8MM");
#endif
#endif
  return f;
}

const CpuFeatures& features() {
  static const CpuFeatures detected = detect_features();
  return detected;
}

// CPUID leaf 1 family, extended family included.
unsigned cpu_family() {
#if MUSER_X86_DISPATCH
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return 0;
  const unsigned base = (eax >> 8) & 0xf;
  return base == 0xf ? base + ((eax >> 20) & 0xff) : base;
#else
  return 0;
#endif
}

bool is_amd() {
#if MUSER_X86_DISPATCH
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;  // "AuthenticAMD"
#else
  return false;
#endif
}

// Four streams on Intel, one elsewhere. Measured with
// benchmarks/device/gemv_streams_check.sh: on the 16-core Xeon four cut
// llama-1b Q4_0 decode from 72.3 to 55.7 ms per step at 1 thread, 24.0 to
// 17.7 at 4 and 8.0 to 7.0 at 16 (Q4_K 96.0 to 67.4 at 1 thread, level at 4
// and 16); on the AMD EPYC guest one stream read a 148 MB pack ~30% faster
// than four.
//
// Asked once: gemv_streams() is read by every decode-sized matmul task, and
// CPUID in a virtual machine traps to the hypervisor (on the 2-core EPYC
// guest a CPUID per task was 40% of smollm2's single-row decode).
size_t default_gemv_streams() {
  static const size_t streams = is_amd() ? 1 : kMaxGemvStreams;
  return streams;
}

std::atomic<size_t> gemv_streams_override{0};

}  // namespace

bool splits_512bit_ops() {
  static const bool split = is_amd() && cpu_family() == 0x19;
  return split;
}

size_t gemv_streams() {
  const size_t forced = gemv_streams_override.load(std::memory_order_relaxed);
  return forced != 0 ? forced : default_gemv_streams();
}

size_t set_gemv_streams(size_t streams) {
  if (streams > kMaxGemvStreams) {
    throw InvalidArgument(format_where("cpu", "gemv streams must be 0 (the default) to " +
                                                  std::to_string(kMaxGemvStreams) + ", got " +
                                                  std::to_string(streams)));
  }
  const size_t previous = gemv_streams();
  gemv_streams_override.store(streams, std::memory_order_relaxed);
  return previous;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vnni: return "avx512vnni";
    case Isa::Avx512Amx: return "avx512amx";
    case Isa::Neon: return "neon";
    case Isa::NeonDotprod: return "neon_dotprod";
    case Isa::NeonI8mm: return "neon_i8mm";
  }
  return "unknown";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return features().avx2;
    case Isa::Avx512: return features().avx512;
    case Isa::Avx512Vnni: return features().avx512vnni;
    case Isa::Avx512Amx: return features().amx;
    case Isa::Neon: return features().neon;
    case Isa::NeonDotprod: return features().dotprod;
    case Isa::NeonI8mm: return features().i8mm;
  }
  return false;
}

Isa best_isa() {
  static const Isa best = [] {
    // The fastest supported one: the last of kAllIsas this CPU runs (the
    // list is ordered slowest first, and one architecture's entries are
    // never supported on the other).
    Isa found = Isa::Scalar;
    for (Isa isa : kAllIsas) {
      if (isa_supported(isa)) found = isa;
    }
    return found;
  }();
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
    case Isa::Avx512Amx: return avx512amx_kernel_set();
#endif
#if MUSER_ARM64_DISPATCH
    case Isa::Neon: return neon_kernel_set();
    case Isa::NeonDotprod: return neon_dotprod_kernel_set();
    case Isa::NeonI8mm: return neon_i8mm_kernel_set();
#endif
    default: break;
  }
  throw InternalError("[cpu] no kernel table for a supported instruction set");
}

Isa parse_isa(const char* name) {
  Isa isa = Isa::Scalar;
  if (std::strcmp(name, "best") == 0) {
    isa = best_isa();
  } else {
    bool known = false;
    for (Isa candidate : kAllIsas) {
      if (std::strcmp(name, isa_name(candidate)) == 0) {
        isa = candidate;
        known = true;
      }
    }
    if (!known) {
      throw InvalidArgument(format_where(
          "cpu", std::string("unknown instruction set: expected scalar, avx2, avx512, avx512vnni, avx512amx, neon, "
                             "neon_dotprod, neon_i8mm or best, got '") +
                     name + "'"));
    }
  }
  if (!isa_supported(isa)) {
    throw InvalidArgument(format_where(
        "cpu", std::string("instruction set '") + name + "' is not supported by this CPU"));
  }
  return isa;
}

const KernelSet& testing_kernel_set(const char* name) {
  if (std::strcmp(name, "avx512amx_emulated") == 0) {
#if MUSER_X86_DISPATCH
    if (isa_supported(Isa::Avx512Vnni)) return avx512amx_emulated_kernel_set();
#endif
    throw InvalidArgument(format_where("cpu", "the emulated AMX table needs AVX-512 VNNI, which this CPU lacks"));
  }
  return kernel_set(parse_isa(name));
}

}  // namespace muser::cpu
