#include "core/thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sched.h>

#include <cstdio>
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#include <sys/types.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/error.h"

namespace muser {
namespace {

// How long an idle thread polls before sleeping on a condition variable. A
// decode step issues ~200 short parallel_for calls back to back; polling for
// a few tens of microseconds keeps the workers awake between them without
// burning a core when the pool is idle.
constexpr std::chrono::microseconds kSpinBudget{50};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `ready` until it holds or the spin budget runs out; true if it held.
template <typename Predicate>
bool spin_until(Predicate ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinBudget;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

}  // namespace

// One job at a time. Tasks are claimed through one 64-bit word, `claim` =
// (job id << 32) | next task index, advanced only by compare-and-swap, so a
// worker that wakes late for a job that already finished (or sees a newer
// one half-published) fails its claim and never touches that job's task.
// The caller waits for the count of *completed* tasks, not for every worker:
// a worker the OS has not scheduled yet cannot hold a job up, the caller
// simply runs its share of the tasks.
struct ThreadPool::Impl {
  static constexpr uint64_t kClosed = ~uint64_t{0};  // no job open for claims

  int n_threads = 1;
  std::vector<std::thread> workers;

  std::mutex mutex;
  std::condition_variable work_ready;  // a job was published (or stopping)
  std::condition_variable work_done;   // the last task of a job completed
  std::atomic<bool> stopping{false};

  std::atomic<uint32_t> job_id{0};          // id of the latest published job
  std::atomic<uint64_t> claim{kClosed};
  std::atomic<size_t> tasks_done{0};
  // Of the open job. Read before a claim is attempted, so atomic; a value
  // read for a job that is no longer open is never acted on (the claim fails).
  std::atomic<size_t> n_tasks{0};
  const std::function<void(size_t, int)>* task = nullptr;

  // The exception of the lowest-numbered failing task, so which error the
  // caller sees does not depend on thread timing.
  std::mutex error_mutex;
  std::exception_ptr error;
  size_t error_task = 0;

  // Claims and runs tasks of job `id` until none are left.
  void run_tasks(uint32_t id, int thread_index) {
    uint64_t current = claim.load(std::memory_order_acquire);
    for (;;) {
      if (current == kClosed || (current >> 32) != id) return;
      const size_t i = static_cast<size_t>(current & 0xffffffffu);
      const size_t total = n_tasks.load(std::memory_order_relaxed);
      if (i >= total) return;
      if (!claim.compare_exchange_weak(current, current + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        continue;  // `current` now holds the fresh value
      }
      try {
        (*task)(i, thread_index);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error || i < error_task) {
          error = std::current_exception();
          error_task = i;
        }
      }
      if (tasks_done.fetch_add(1, std::memory_order_acq_rel) + 1 == total) {
        std::lock_guard<std::mutex> lock(mutex);
        work_done.notify_one();
      }
      current = claim.load(std::memory_order_acquire);
    }
  }

  void worker_loop(int thread_index) {
    uint32_t seen = 0;
    for (;;) {
      const auto published = [&] {
        return stopping.load(std::memory_order_acquire) ||
               job_id.load(std::memory_order_acquire) != seen;
      };
      if (!spin_until(published)) {
        std::unique_lock<std::mutex> lock(mutex);
        work_ready.wait(lock, published);
      }
      if (stopping.load(std::memory_order_acquire)) return;
      seen = job_id.load(std::memory_order_acquire);
      run_tasks(seen, thread_index);
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
  if (n_threads < 1) {
    throw InvalidArgument(format_where(
        "ThreadPool", "n_threads must be >= 1, got " + std::to_string(n_threads)));
  }
  impl_->n_threads = n_threads;
  impl_->workers.reserve(static_cast<size_t>(n_threads - 1));
  try {
    for (int t = 1; t < n_threads; ++t) {
      impl_->workers.emplace_back([impl = impl_.get(), t] { impl->worker_loop(t); });
    }
  } catch (const std::system_error& e) {
    {
      std::lock_guard<std::mutex> lock(impl_->mutex);
      impl_->stopping.store(true, std::memory_order_release);
    }
    impl_->work_ready.notify_all();
    for (std::thread& w : impl_->workers) w.join();
    throw InternalError(format_where("ThreadPool", std::string("could not start a thread: ") + e.what()));
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping.store(true, std::memory_order_release);
  }
  impl_->work_ready.notify_all();
  for (std::thread& w : impl_->workers) w.join();
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::parallel_for(size_t n_tasks,
                              const std::function<void(size_t task, int thread)>& task) {
  if (n_tasks == 0) return;
  Impl& s = *impl_;
  if (s.n_threads == 1 || n_tasks == 1) {
    // Inline: same semantics (every task runs, lowest failing index wins).
    std::exception_ptr error;
    for (size_t i = 0; i < n_tasks; ++i) {
      try {
        task(i, 0);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }
  if (n_tasks > 0xffffffffu) {
    throw InvalidArgument(format_where("ThreadPool", "parallel_for takes at most 2^32 - 1 tasks, got " +
                                                         std::to_string(n_tasks)));
  }

  // The previous job is complete, so nobody can hold a claim on it; stale
  // claim attempts fail against kClosed or the new job id.
  const uint32_t id = s.job_id.load(std::memory_order_relaxed) + 1;
  s.claim.store(Impl::kClosed, std::memory_order_release);
  s.error = nullptr;
  s.error_task = 0;
  s.task = &task;
  s.n_tasks.store(n_tasks, std::memory_order_relaxed);
  s.tasks_done.store(0, std::memory_order_relaxed);
  s.claim.store(static_cast<uint64_t>(id) << 32, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.job_id.store(id, std::memory_order_release);
  }
  s.work_ready.notify_all();

  s.run_tasks(id, 0);

  const auto all_done = [&] { return s.tasks_done.load(std::memory_order_acquire) == n_tasks; };
  if (!spin_until(all_done)) {
    std::unique_lock<std::mutex> lock(s.mutex);
    s.work_done.wait(lock, all_done);
  }
  s.claim.store(Impl::kClosed, std::memory_order_release);
  s.task = nullptr;
  if (s.error) {
    std::exception_ptr error = std::move(s.error);
    s.error = nullptr;
    std::rethrow_exception(error);
  }
}

#if defined(__linux__)
namespace {
// One non-negative integer from a sysfs file, or -1. C stdio rather than
// std::ifstream: parsing a long through iostreams crashed inside libstdc++'s
// locale facets on the GPU machine (gcc 13 image, extension built with the
// static CUDA runtime), and a sysfs number needs no locale.
long read_sysfs_long(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return -1;
  long value = -1;
  if (std::fscanf(f, "%ld", &value) != 1) value = -1;
  std::fclose(f);
  return value;
}
}  // namespace
#endif

int physical_core_count() {
  const int logical = static_cast<int>(std::thread::hardware_concurrency());
#if defined(__linux__)
  // Count distinct (package, core) pairs among the CPUs this process may run
  // on, so SMT siblings and CPUs outside our affinity mask do not count.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    std::set<std::pair<long, long>> cores;
    int allowed_count = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &allowed)) continue;
      ++allowed_count;
      const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      const long package = read_sysfs_long(base + "physical_package_id");
      const long core = read_sysfs_long(base + "core_id");
      if (package < 0 || core < 0) {
        cores.clear();
        break;  // topology unknown: fall back to the allowed count
      }
      cores.emplace(package, core);
    }
    if (!cores.empty()) return static_cast<int>(cores.size());
    if (allowed_count > 0) return allowed_count;
  }
#elif defined(__APPLE__)
  int physical = 0;
  size_t size = sizeof physical;
  if (sysctlbyname("hw.physicalcpu", &physical, &size, nullptr, 0) == 0 && physical > 0) {
    return physical;
  }
#endif
  return logical > 0 ? logical : 1;
}

}  // namespace muser
