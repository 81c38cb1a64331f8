// A CPU emulator for Metal compute dispatches, for testing metal/*.metal on
// Linux. Kernels are compiled as C++ against include/metal_stdlib; a
// generated thunk per kernel (gen_kernel_thunks.py) binds each [[attribute]]
// parameter from a Bindings table and the calling thread's ThreadContext.
//
// Execution model:
// - Threadgroups of a grid run one after another, in the chosen order.
// - Inside a threadgroup every Metal thread is a coroutine with its own stack
//   (ucontext). A thread runs until it reaches threadgroup_barrier, a simd
//   function or its end; then the scheduler switches to another thread.
//   threadgroup_barrier releases once every thread of the threadgroup is
//   waiting there; a barrier reached after some threads returned is an error
//   (on a GPU it hangs or is undefined).
// - A simdgroup is 32 consecutive threads (thread_index_in_threadgroup / 32).
//   Simd functions are rendezvous of the simdgroup's running lanes; lanes that
//   returned are inactive. Lanes of one simdgroup waiting at different kinds
//   of simd function, or one at a simd function while another waits at a
//   threadgroup barrier, are reported as divergence.
// - Order::Forward runs ready threads and threadgroups in index order,
//   Reverse backwards, Random shuffles both at every scheduling round (seeded).
//   A kernel that gives different results under different orders is missing a
//   barrier.
// - Threadgroup memory is allocated per threadgroup at exactly the size the
//   host set (so AddressSanitizer catches overruns) and filled with 0xff bytes
//   (NaN as floats) so reads of unwritten memory show up in results.
//
// Not thread-safe: one dispatch at a time per process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace mtlemu {

constexpr unsigned kSimdWidth = 32;
constexpr unsigned kMaxBindings = 31;            // Metal's argument table size
constexpr unsigned kMaxThreadsPerThreadgroup = 1024;

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

enum class Order { Forward, Reverse, Random };
Order parse_order(const std::string& name);  // "forward" | "reverse" | "random"

// A problem found while running a kernel (not a sanitizer finding: those
// abort the process with their own report).
class EmulatorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the encoder bound for one dispatch.
struct Bindings {
  struct Buffer {
    void* data = nullptr;  // base + offset
    size_t bytes = 0;      // bytes from data to the end of the buffer (or of set_bytes)
    bool bound = false;
    bool inline_bytes = false;  // set by set_bytes: a reference parameter must match its size exactly
  };
  Buffer buffers[kMaxBindings];
  size_t threadgroup_bytes[kMaxBindings] = {};
  bool threadgroup_set[kMaxBindings] = {};
};

// The [[attribute]] values of one Metal thread.
struct ThreadContext {
  Dim3 thread_position_in_grid;
  Dim3 thread_position_in_threadgroup;
  Dim3 threadgroup_position_in_grid;
  Dim3 threads_per_threadgroup;
  Dim3 threadgroups_per_grid;
  Dim3 threads_per_grid;
  uint32_t thread_index_in_threadgroup = 0;
  uint32_t thread_index_in_simdgroup = 0;
  uint32_t simdgroup_index_in_threadgroup = 0;
  uint32_t simdgroups_per_threadgroup = 0;
  uint32_t threads_per_simdgroup = kSimdWidth;
  const Bindings* bindings = nullptr;
  void* const* threadgroup_memory = nullptr;  // kMaxBindings pointers
  const char* kernel = nullptr;
};

using KernelThunk = void (*)(const ThreadContext&);
struct KernelInfo {
  const char* name;
  KernelThunk thunk;
};

// Generated registration (one static object per kernel).
void register_kernel(const KernelInfo& info);
// Null when no kernel of that name was compiled in.
const KernelInfo* find_kernel(const std::string& name);

// Runs a grid of `threadgroups` threadgroups of `threads` threads each
// (Metal's dispatchThreadgroups:threadsPerThreadgroup:). Throws EmulatorError.
void dispatch(const KernelInfo& kernel, const Bindings& bindings, Dim3 threadgroups, Dim3 threads, Order order,
              uint64_t seed);

// ---- called from kernels (through metal_stdlib) and generated thunks

void threadgroup_barrier();
void simdgroup_barrier();
// Ends the current Metal thread's dispatch with an error (never returns).
[[noreturn]] void fail(const std::string& what);

// One simd rendezvous: the constructor deposits this lane's value and waits
// for the simdgroup's other running lanes; reads follow; the destructor waits
// again so no lane overwrites its slot before every lane has read.
class SimdExchange {
 public:
  SimdExchange(const void* value, size_t bytes, int op);
  ~SimdExchange();
  SimdExchange(const SimdExchange&) = delete;
  SimdExchange& operator=(const SimdExchange&) = delete;

  bool active(unsigned lane) const;
  unsigned lane() const { return lane_; }
  template <typename T>
  T value(unsigned lane) const {
    T v;
    read(lane, &v, sizeof v);
    return v;
  }

 private:
  void read(unsigned lane, void* out, size_t bytes) const;
  unsigned lane_;
};

// ---- argument binding used by generated thunks

const void* buffer_argument(const ThreadContext& t, unsigned index, size_t min_bytes);
void* threadgroup_argument(const ThreadContext& t, unsigned index);

template <typename T>
T bind_buffer(const ThreadContext& t, unsigned index) {
  if constexpr (std::is_pointer_v<T>) {
    return (T)(buffer_argument(t, index, 0));
  } else {
    static_assert(std::is_reference_v<T>, "a [[buffer(n)]] parameter is a pointer or a reference");
    using Value = std::remove_reference_t<T>;
    return *static_cast<Value*>(const_cast<void*>(buffer_argument(t, index, sizeof(Value))));
  }
}

template <typename T>
T bind_threadgroup(const ThreadContext& t, unsigned index) {
  static_assert(std::is_pointer_v<T>, "a [[threadgroup(n)]] parameter is a pointer");
  return static_cast<T>(threadgroup_argument(t, index));
}

template <typename T>
T bind_position(Dim3 d) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<T>(d.x);
  } else {
    // A 2- or 3-element clang ext_vector_type (uint2, ushort3, ...).
    T v{};
    using Elem = std::remove_reference_t<decltype(v[0])>;
    constexpr size_t n = sizeof(T) / sizeof(Elem) >= 3 ? 3 : 2;
    v[0] = static_cast<Elem>(d.x);
    v[1] = static_cast<Elem>(d.y);
    if constexpr (n == 3) v[2] = static_cast<Elem>(d.z);
    return v;
  }
}

template <typename T>
T bind_position(uint32_t value) {
  static_assert(std::is_arithmetic_v<T>, "this attribute is a scalar");
  return static_cast<T>(value);
}

}  // namespace mtlemu
