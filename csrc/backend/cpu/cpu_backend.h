// The CPU backend: runs step graphs on cpu::matmul for the weights and the
// f32 ops in ops_*.h for the rest, with the engine's thread pool.
//
// Execution: each graph is compiled once (by graph id) into a plan of
// stages (cpu_plan.h). A step enters ONE parallel region: every pool thread
// walks the same list of stages, takes its own "home" task of the current
// stage and then claims the rest from a shared counter, and moves on once
// that stage's tasks are all done (a light barrier on a completion count;
// a home task whose thread the OS has not scheduled is taken over after a
// short spin, so such a thread holds nobody up for long). While waiting, a
// thread prefetches the weights of its next matmul task. No pool dispatch
// or wake-up happens per op.
//
// Batch invariance: the matmuls compute each row independently; every other
// op is per row (norms, RoPE, activations) or per (row, head) (attention
// visits positions in ascending order). Parallelism only splits rows, heads
// and output columns, never a reduction.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_plan.h"
#include "backend/cpu/ops_activation.h"
#include "backend/cpu/vec_f16.h"
#include "core/thread_pool.h"

namespace muser::cpu {

class CpuBackend final : public Backend {
 public:
  // The pool is shared with the engine; steps use all its threads.
  explicit CpuBackend(std::shared_ptr<ThreadPool> pool);
  ~CpuBackend() override;

  const char* name() const override { return "cpu"; }
  void load_weights(const WeightTable& weights) override;
  std::unique_ptr<KvStorage> new_kv_storage(const KvLayout& layout) const override;
  void execute(const StepGraph& graph, const StepInputs& inputs) override;

  // Plans kept (the least recently used is dropped).
  static constexpr size_t kPlanCacheSize = 32;

 private:
  // Claims and completions on separate cache lines: the threads waiting on
  // `done` re-read it in a loop, and each claim would otherwise take the
  // line away from all of them.
  struct StageCounter {
    alignas(64) std::atomic<size_t> claim{0};
    alignas(64) std::atomic<size_t> done{0};
  };
  // Per pool thread t: the serial number (stage_serial) of the last stage
  // whose home task (task t) was given out, to t or to a thread that took
  // it over. Serials only grow (never reset across steps), so a
  // stage's home task goes out exactly once: to whoever moves the slot to
  // that stage's serial.
  struct HomeSlot {
    alignas(64) std::atomic<uint64_t> serial{0};
  };
  // Where a waiting thread's prefetch of its next task's weights stands.
  struct Prefetch {
    size_t stage = ~size_t{0};
    const uint8_t* next = nullptr;
    const uint8_t* end = nullptr;
  };

  const Plan& plan_for(const StepGraph& graph);
  // Everything a step's tasks read besides the plan: set up by execute
  // before the parallel region.
  void prepare_step(const Plan& plan, const StepGraph& graph, const StepInputs& inputs);
  void run_region(const Plan& plan, const StepGraph& graph, const StepInputs& inputs, int thread);
  // Runs task `task` of stage s (a failure is kept, the task still counts).
  void run_counted(const Plan& plan, size_t s, size_t task, const StepGraph& graph, const StepInputs& inputs,
                   int thread);
  // Waits until stage s is done; meanwhile takes over home tasks of s that
  // nobody claimed, and prefetches this thread's next matmul task.
  void wait_for_stage(const Plan& plan, size_t s, const StepGraph& graph, const StepInputs& inputs, int thread,
                      Prefetch& prefetch);
  bool claim_home(size_t owner, uint64_t serial);
  // Runs the home tasks of stage s (of n_home) that nobody has claimed;
  // returns how many.
  size_t take_over(const Plan& plan, size_t s, size_t n_home, const StepGraph& graph, const StepInputs& inputs,
                   int thread);
  // Tasks of a stage of `total` tasks that are home tasks (task t of thread
  // t): none for a one-task stage (whoever comes first runs it, so no
  // particular thread has to be there), else one per thread at most.
  size_t home_tasks(size_t total) const { return total > 1 ? std::min(total, n_threads_) : 0; }
  uint64_t stage_serial(size_t s) const { return serial_base_ + s; }
  void run_task(const Plan& plan, const Stage& stage, size_t task, const StepGraph& graph,
                const StepInputs& inputs, int thread);
  // Rows [first, last); the column-local ops (cpu_plan.cpp) only columns
  // [col_first, min(col_last, width)), the others whole rows (kWholeRow).
  static constexpr size_t kWholeRow = ~size_t{0};
  void run_row_op(const Op& op, const StepGraph& graph, const StepInputs& inputs, size_t first, size_t last,
                  size_t col_first, size_t col_last);
  void run_attention_task(const Op& op, size_t task, size_t stage_index, const StepInputs& inputs, int thread);

  float* f32(TensorId t) const;
  const int32_t* ints(TensorId t, const StepGraph& graph, const StepInputs& inputs) const;

  std::shared_ptr<ThreadPool> pool_;
  const F16VecOps& f16_;
  const ActivationOps& activations_;
  WeightViews weights_;
  std::list<std::unique_ptr<Plan>> plans_;  // most recently used first

  // Step state (steps run one at a time).
  const Plan* plan_ = nullptr;
  std::vector<float> arena_;                  // activations and RoPE tables
  std::vector<uint8_t> act_bytes_;            // quantized activation rows (64-byte aligned inside)
  uint8_t* act_base_ = nullptr;
  std::vector<std::vector<float>> scores_;    // per thread: attention scratch
  std::vector<AttentionBlock> blocks_;
  std::vector<CpuKvStorage*> slot_storage_;
  std::vector<size_t> stage_tasks_;           // tasks of each stage for this step
  std::vector<size_t> heads_per_task_;        // per stage (attention stages only)
  std::unique_ptr<StageCounter[]> counters_;
  size_t n_counters_ = 0;
  std::unique_ptr<HomeSlot[]> home_;          // one per pool thread
  size_t n_threads_ = 1;
  uint64_t serial_base_ = 1;                  // this step's stage s has serial serial_base_ + s
  uint64_t next_serial_ = 1;
  std::vector<size_t> next_tiles_;            // per stage: the first decode Tiles stage at or after it (or none)
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

}  // namespace muser::cpu
