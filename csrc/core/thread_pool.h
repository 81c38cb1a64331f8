// A fixed pool of worker threads for data-parallel kernels. The calling thread
// takes part, so a pool of size 1 runs everything inline.
//
// Thread safety: one parallel_for at a time per pool (the engine serializes
// forwards through the AcceleratorScheduler); parallel_for is reentrancy-safe
// only from the calling thread, never from inside a task.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace muser {

class ThreadPool {
 public:
  // n_threads >= 1 (the caller counts as one). Throws InvalidArgument otherwise.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;

  // Runs task(i, thread_index) for every i in [0, n_tasks) and returns when
  // all are done. Tasks are handed out in order; an exception thrown by a task
  // is rethrown here after the others finish.
  void parallel_for(size_t n_tasks, const std::function<void(size_t task, int thread)>& task);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Number of physical cores (not SMT siblings) when it can be told, else the
// logical count; at least 1.
int physical_core_count();

}  // namespace muser
