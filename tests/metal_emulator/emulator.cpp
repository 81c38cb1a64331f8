// Coroutine scheduler behind emulator.h. See the header for the model.
#include "emulator.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MTLEMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MTLEMU_ASAN 1
#endif
#ifdef MTLEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
// The switch functions are not instrumented: ASan would call
// __asan_handle_no_return before each __builtin_longjmp, which queries the
// signal stack with a system call on every switch. The switches are announced
// to ASan explicitly instead (__sanitizer_*_switch_fiber).
#define MTLEMU_NO_ASAN __attribute__((no_sanitize("address")))
#else
#define MTLEMU_NO_ASAN
#endif

namespace mtlemu {
namespace {

// Each coroutine's stack. Generous because sanitizer builds grow frames.
constexpr size_t kStackBytes = 256 * 1024;

enum class State { Ready, AtBarrier, AtSimd, Done };

struct SimdSlot {
  unsigned char bytes[32];
  size_t size = 0;
};

struct Fiber {
  ucontext_t context;     // first entry only
  void* jump[5] = {};     // __builtin_setjmp buffer: where a yielded fiber resumes
  bool started = false;
  void* stack = nullptr;
  State state = State::Ready;
  ThreadContext thread;
  int simd_op = -1;      // kind of simd function being waited at
  int simd_phase = 0;    // 0 = deposit rendezvous, 1 = release rendezvous
  uint64_t simd_count = 0;  // simd rendezvous passed so far
  bool in_exchange = false;
};

struct Scheduler {
  ucontext_t main_context;
  void* jump[5] = {};  // where the scheduler resumes when a fiber yields
  std::vector<Fiber> fibers;  // one per thread of the current threadgroup
  size_t n_threads = 0;
  Fiber* current = nullptr;
  const KernelInfo* kernel = nullptr;
  std::string error;  // first error raised inside a coroutine
  // A dispatch that failed abandoned fibers mid-frame; AddressSanitizer's
  // poisoning of their frames must be cleared before the stacks are reused.
  bool stacks_dirty = false;
  // simd exchange slots: [simdgroup][lane]
  std::vector<SimdSlot> slots;
  std::vector<bool> slot_active;
#ifdef MTLEMU_ASAN
  void* main_fake_stack = nullptr;
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
#endif
};

Scheduler& scheduler() {
  static Scheduler s;
  return s;
}

std::map<std::string, KernelInfo>& registry() {
  static std::map<std::string, KernelInfo> kernels;
  return kernels;
}

// ---- context switches. A fiber is entered the first time with
// swapcontext (it needs makecontext's fresh stack) and afterwards with
// __builtin_setjmp/__builtin_longjmp, which save and restore only the stack
// and frame pointers and the resume address: unlike swapcontext they make no
// signal-mask system call, which otherwise dominates the emulator's run time.
// Switches are annotated for AddressSanitizer so it tracks which stack is
// live (otherwise it reports false stack overflows).

void fiber_entry();

// First entry: continue on the fiber's own stack in fiber_entry, which never
// returns (it leaves with __builtin_longjmp). Plain stack-pointer moves
// where we know the ABI; makecontext/swapcontext elsewhere (under
// AddressSanitizer each swapcontext remaps shadow memory, which is slow).
MTLEMU_NO_ASAN __attribute__((noinline)) void start_on_stack(Fiber& f) {
  char* top = static_cast<char*>(f.stack) + kStackBytes;  // 16-byte aligned (page aligned mapping)
#if defined(__x86_64__)
  asm volatile("mov %0, %%rsp\n\tcall *%1\n\tud2" : : "r"(top), "r"(&fiber_entry) : "memory");
#elif defined(__aarch64__)
  asm volatile("mov sp, %0\n\tblr %1\n\tbrk #0" : : "r"(top), "r"(&fiber_entry) : "memory", "x30");
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, fiber_entry, 0);
  swapcontext(&scheduler().main_context, &f.context);
#endif
}

MTLEMU_NO_ASAN __attribute__((noinline)) void switch_to_fiber(Fiber& fiber) {
  Scheduler& s = scheduler();
  s.current = &fiber;
#ifdef MTLEMU_ASAN
  __sanitizer_start_switch_fiber(&s.main_fake_stack, fiber.stack, kStackBytes);
#endif
  if (__builtin_setjmp(s.jump) == 0) {
    Fiber& f = *scheduler().current;
    if (!f.started) {
      f.started = true;
      start_on_stack(f);
    } else {
      __builtin_longjmp(f.jump, 1);
    }
  }
  Scheduler& back = scheduler();
#ifdef MTLEMU_ASAN
  __sanitizer_finish_switch_fiber(back.main_fake_stack, nullptr, nullptr);
#endif
  back.current = nullptr;
}

// From inside a fiber back to the scheduler. `dying`: the fiber will never be
// resumed (its fake stack can be released).
MTLEMU_NO_ASAN __attribute__((noinline)) void switch_to_scheduler(bool dying) {
  Scheduler& s = scheduler();
  Fiber& fiber = *s.current;
#ifdef MTLEMU_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(dying ? nullptr : &fake_stack, s.main_stack_bottom, s.main_stack_size);
#endif
  if (__builtin_setjmp(fiber.jump) == 0) __builtin_longjmp(scheduler().jump, 1);
#ifdef MTLEMU_ASAN
  Scheduler& back = scheduler();
  __sanitizer_finish_switch_fiber(fake_stack, &back.main_stack_bottom, &back.main_stack_size);
#endif
  (void)dying;
}

void fiber_entry() {
  Scheduler& s = scheduler();
#ifdef MTLEMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &s.main_stack_bottom, &s.main_stack_size);
#endif
  Fiber& fiber = *s.current;
  s.kernel->thunk(fiber.thread);
  fiber.state = State::Done;
  switch_to_scheduler(true);
  // Never resumed: a Done fiber is not scheduled again.
  std::abort();
}

void wait_as(State state) {
  Scheduler& s = scheduler();
  if (s.current == nullptr) throw EmulatorError("barrier or simd function called outside a kernel");
  s.current->state = state;
  switch_to_scheduler(false);
}

std::string describe(const Fiber& f) {
  const ThreadContext& t = f.thread;
  return "thread " + std::to_string(t.thread_index_in_threadgroup) + " of threadgroup (" +
         std::to_string(t.threadgroup_position_in_grid.x) + "," + std::to_string(t.threadgroup_position_in_grid.y) +
         "," + std::to_string(t.threadgroup_position_in_grid.z) + ")";
}

const char* simd_op_name(int op) {
  static const char* names[] = {"simd_sum", "simd_max", "simd_min", "simd_shuffle", "simd_broadcast",
                                "simd_shuffle_xor", "simd_shuffle_down", "simdgroup_barrier"};
  return op >= 0 && op < 8 ? names[op] : "simd function";
}

// Releases one simdgroup whose running lanes all wait at a simd rendezvous.
// Returns false (with s.error set) on divergence.
bool release_simdgroups(Scheduler& s, bool& released_any) {
  const size_t n_groups = (s.n_threads + kSimdWidth - 1) / kSimdWidth;
  for (size_t g = 0; g < n_groups; ++g) {
    const size_t begin = g * kSimdWidth;
    const size_t end = std::min(s.n_threads, begin + kSimdWidth);
    Fiber* first_simd = nullptr;
    Fiber* first_barrier = nullptr;
    bool any_running = false;
    for (size_t i = begin; i < end; ++i) {
      Fiber& f = s.fibers[i];
      if (f.state == State::AtSimd && first_simd == nullptr) first_simd = &f;
      if (f.state == State::AtBarrier && first_barrier == nullptr) first_barrier = &f;
      if (f.state == State::Ready) any_running = true;
    }
    if (first_simd == nullptr || any_running) continue;
    if (first_barrier != nullptr) {
      s.error = "simdgroup divergence in " + std::string(s.kernel->name) + ": " + describe(*first_simd) +
                " waits at " + simd_op_name(first_simd->simd_op) + " while " + describe(*first_barrier) +
                " waits at threadgroup_barrier";
      return false;
    }
    for (size_t i = begin; i < end; ++i) {
      Fiber& f = s.fibers[i];
      if (f.state != State::AtSimd) continue;
      if (f.simd_op != first_simd->simd_op || f.simd_phase != first_simd->simd_phase ||
          f.simd_count != first_simd->simd_count) {
        s.error = "simdgroup divergence in " + std::string(s.kernel->name) + ": " + describe(*first_simd) +
                  " waits at " + simd_op_name(first_simd->simd_op) + " (#" + std::to_string(first_simd->simd_count) +
                  ") while " + describe(f) + " waits at " + simd_op_name(f.simd_op) + " (#" +
                  std::to_string(f.simd_count) + ")";
        return false;
      }
    }
    for (size_t i = begin; i < end; ++i) {
      if (s.fibers[i].state == State::AtSimd) s.fibers[i].state = State::Ready;
    }
    released_any = true;
  }
  return true;
}

void run_threadgroup(Scheduler& s, Dim3 group, Dim3 groups, Dim3 threads, Order order, std::mt19937_64& rng,
                     const Bindings& bindings) {
  // Threadgroup memory for this group, exactly the sizes the host set.
  std::vector<std::unique_ptr<unsigned char[]>> memory(kMaxBindings);
  void* memory_ptrs[kMaxBindings] = {};
  for (unsigned i = 0; i < kMaxBindings; ++i) {
    if (!bindings.threadgroup_set[i]) continue;
    const size_t n = bindings.threadgroup_bytes[i];
    memory[i].reset(new unsigned char[n == 0 ? 1 : n]);
    std::memset(memory[i].get(), 0xff, n);
    memory_ptrs[i] = memory[i].get();
  }

  const size_t n = static_cast<size_t>(threads.x) * threads.y * threads.z;
  s.n_threads = n;
  const uint32_t n_simdgroups = static_cast<uint32_t>((n + kSimdWidth - 1) / kSimdWidth);
  s.slots.assign(n_simdgroups * kSimdWidth, SimdSlot{});
  s.slot_active.assign(n_simdgroups * kSimdWidth, false);
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = s.fibers[i];
    f.state = State::Ready;
    f.started = false;
    f.simd_count = 0;
    f.in_exchange = false;
    ThreadContext& t = f.thread;
    t = ThreadContext{};
    t.thread_position_in_threadgroup = {static_cast<uint32_t>(i % threads.x),
                                        static_cast<uint32_t>((i / threads.x) % threads.y),
                                        static_cast<uint32_t>(i / (static_cast<size_t>(threads.x) * threads.y))};
    t.threadgroup_position_in_grid = group;
    t.threads_per_threadgroup = threads;
    t.threadgroups_per_grid = groups;
    t.threads_per_grid = {groups.x * threads.x, groups.y * threads.y, groups.z * threads.z};
    t.thread_position_in_grid = {group.x * threads.x + t.thread_position_in_threadgroup.x,
                                 group.y * threads.y + t.thread_position_in_threadgroup.y,
                                 group.z * threads.z + t.thread_position_in_threadgroup.z};
    t.thread_index_in_threadgroup = static_cast<uint32_t>(i);
    t.thread_index_in_simdgroup = static_cast<uint32_t>(i % kSimdWidth);
    t.simdgroup_index_in_threadgroup = static_cast<uint32_t>(i / kSimdWidth);
    t.simdgroups_per_threadgroup = n_simdgroups;
    t.bindings = &bindings;
    t.threadgroup_memory = memory_ptrs;
    t.kernel = s.kernel->name;
  }

  std::vector<size_t> sequence(n);
  for (size_t i = 0; i < n; ++i) sequence[i] = order == Order::Reverse ? n - 1 - i : i;
  for (;;) {
    if (order == Order::Random) std::shuffle(sequence.begin(), sequence.end(), rng);
    bool ran = false;
    for (size_t i : sequence) {
      Fiber& f = s.fibers[i];
      if (f.state != State::Ready) continue;
      switch_to_fiber(f);
      ran = true;
      if (!s.error.empty()) throw EmulatorError(s.error);
    }
    if (ran) continue;
    size_t done = 0;
    size_t at_barrier = 0;
    for (size_t i = 0; i < n; ++i) {
      done += s.fibers[i].state == State::Done;
      at_barrier += s.fibers[i].state == State::AtBarrier;
    }
    if (done == n) return;
    bool released = false;
    if (!release_simdgroups(s, released)) throw EmulatorError(s.error);
    if (released) continue;
    if (at_barrier + done == n) {
      if (done != 0) {
        const Fiber* returned = nullptr;
        const Fiber* waiting = nullptr;
        for (size_t i = 0; i < n; ++i) {
          if (s.fibers[i].state == State::Done && returned == nullptr) returned = &s.fibers[i];
          if (s.fibers[i].state == State::AtBarrier && waiting == nullptr) waiting = &s.fibers[i];
        }
        throw EmulatorError("threadgroup_barrier in " + std::string(s.kernel->name) + " reached by " +
                            std::to_string(at_barrier) + " threads after " + std::to_string(done) +
                            " threads returned (" + describe(*waiting) + " waits, " + describe(*returned) +
                            " returned): on a GPU this hangs or is undefined");
      }
      for (size_t i = 0; i < n; ++i) s.fibers[i].state = State::Ready;
      continue;
    }
    throw EmulatorError("deadlock in " + std::string(s.kernel->name) +
                        ": threads wait at simd functions of simdgroups whose other lanes never arrive");
  }
}

}  // namespace

Order parse_order(const std::string& name) {
  if (name == "forward") return Order::Forward;
  if (name == "reverse") return Order::Reverse;
  if (name == "random") return Order::Random;
  throw EmulatorError("thread order: expected forward, reverse or random, got '" + name + "'");
}

void register_kernel(const KernelInfo& info) { registry()[info.name] = info; }

const KernelInfo* find_kernel(const std::string& name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

void dispatch(const KernelInfo& kernel, const Bindings& bindings, Dim3 groups, Dim3 threads, Order order,
              uint64_t seed) {
  Scheduler& s = scheduler();
  const size_t n = static_cast<size_t>(threads.x) * threads.y * threads.z;
  if (n == 0 || n > kMaxThreadsPerThreadgroup) {
    throw EmulatorError(std::string(kernel.name) + ": threads per threadgroup must be 1.." +
                        std::to_string(kMaxThreadsPerThreadgroup) + ", got " + std::to_string(n));
  }
  if (groups.x == 0 || groups.y == 0 || groups.z == 0) {
    throw EmulatorError(std::string(kernel.name) + ": empty grid");
  }
  while (s.fibers.size() < n) {
    Fiber f;
    f.stack = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (f.stack == MAP_FAILED) throw EmulatorError("cannot map a coroutine stack");
    s.fibers.push_back(f);
  }
  s.kernel = &kernel;
  s.error.clear();

  std::vector<Dim3> order_of_groups;
  for (uint32_t z = 0; z < groups.z; ++z)
    for (uint32_t y = 0; y < groups.y; ++y)
      for (uint32_t x = 0; x < groups.x; ++x) order_of_groups.push_back({x, y, z});
  std::mt19937_64 rng(seed);
  if (order == Order::Reverse) std::reverse(order_of_groups.begin(), order_of_groups.end());
  if (order == Order::Random) std::shuffle(order_of_groups.begin(), order_of_groups.end(), rng);
#ifdef MTLEMU_ASAN
  if (s.stacks_dirty) {
    for (Fiber& f : s.fibers) __asan_unpoison_memory_region(f.stack, kStackBytes);
  }
#endif
  s.stacks_dirty = true;
  for (const Dim3& g : order_of_groups) run_threadgroup(s, g, groups, threads, order, rng, bindings);
  s.stacks_dirty = false;
}

void threadgroup_barrier() { wait_as(State::AtBarrier); }

void fail(const std::string& what) {
  Scheduler& s = scheduler();
  if (s.current == nullptr) throw EmulatorError(what);
  if (s.error.empty()) s.error = what + " (" + describe(*s.current) + " of " + s.kernel->name + ")";
  s.current->state = State::Done;
  switch_to_scheduler(true);
  std::abort();
}

SimdExchange::SimdExchange(const void* value, size_t bytes, int op) {
  Scheduler& s = scheduler();
  if (s.current == nullptr) throw EmulatorError("simd function called outside a kernel");
  Fiber& f = *s.current;
  lane_ = f.thread.thread_index_in_simdgroup;
  if (bytes > sizeof(SimdSlot::bytes)) fail("simd value too large for the emulator");
  const size_t slot = f.thread.simdgroup_index_in_threadgroup * kSimdWidth + lane_;
  std::memcpy(s.slots[slot].bytes, value, bytes);
  s.slots[slot].size = bytes;
  s.slot_active[slot] = true;
  f.simd_op = op;
  f.simd_phase = 0;
  wait_as(State::AtSimd);
  ++f.simd_count;
}

SimdExchange::~SimdExchange() {
  Scheduler& s = scheduler();
  Fiber& f = *s.current;
  f.simd_phase = 1;
  wait_as(State::AtSimd);
  const size_t slot = f.thread.simdgroup_index_in_threadgroup * kSimdWidth + lane_;
  s.slot_active[slot] = false;
  ++f.simd_count;
}

bool SimdExchange::active(unsigned lane) const {
  Scheduler& s = scheduler();
  const size_t base = s.current->thread.simdgroup_index_in_threadgroup * kSimdWidth;
  return lane < kSimdWidth && s.slot_active[base + lane];
}

void SimdExchange::read(unsigned lane, void* out, size_t bytes) const {
  Scheduler& s = scheduler();
  if (!active(lane)) fail("simd function reads lane " + std::to_string(lane) + ", which is not active");
  const size_t base = s.current->thread.simdgroup_index_in_threadgroup * kSimdWidth;
  if (s.slots[base + lane].size != bytes) fail("simd function: lanes passed values of different sizes");
  std::memcpy(out, s.slots[base + lane].bytes, bytes);
}

void simdgroup_barrier() {
  // A rendezvous of the simdgroup's running lanes with nothing exchanged.
  const int none = 0;
  SimdExchange ex(&none, sizeof none, 7);
}

const void* buffer_argument(const ThreadContext& t, unsigned index, size_t min_bytes) {
  if (index >= kMaxBindings || !t.bindings->buffers[index].bound) {
    fail(std::string(t.kernel) + ": no buffer bound at index " + std::to_string(index));
  }
  const Bindings::Buffer& b = t.bindings->buffers[index];
  if (b.inline_bytes && min_bytes != 0 && b.bytes != min_bytes) {
    fail(std::string(t.kernel) + ": argument " + std::to_string(index) + " is a " + std::to_string(min_bytes) +
         "-byte struct but set_bytes passed " + std::to_string(b.bytes) + " bytes");
  }
  if (b.bytes < min_bytes) {
    fail(std::string(t.kernel) + ": argument " + std::to_string(index) + " needs " + std::to_string(min_bytes) +
         " bytes, " + std::to_string(b.bytes) + " bound");
  }
  return b.data;
}

void* threadgroup_argument(const ThreadContext& t, unsigned index) {
  if (index >= kMaxBindings || !t.bindings->threadgroup_set[index]) {
    fail(std::string(t.kernel) + ": no threadgroup memory set at index " + std::to_string(index));
  }
  return t.threadgroup_memory[index];
}

}  // namespace mtlemu
