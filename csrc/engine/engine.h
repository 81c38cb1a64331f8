// The engine: one model file, mapped once, its hyperparameters and tensors,
// one backend and its thread pool. Sessions are made from it and keep it
// alive. Immutable after open() apart from the forward lock; share it freely
// across threads.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "backend/testing/fault_injecting_backend.h"
#include "core/thread_pool.h"
#include "engine/accelerator_scheduler.h"
#include "engine/step_runner.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace muser {

class Session;

struct EngineOptions {
  int threads = 0;                 // compute threads; 0 = physical cores
  std::string backend = "auto";    // "auto" (best usable) or a name from list_backends()
  double null_step_seconds = 0.0;  // per-forward sleep of the null backend
  double null_prefill_seconds_per_row = 0.0;  // its extra sleep per row of a multi-row (prompt) segment
};

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  // Maps the file and validates it. Throws ModelFormatError for a bad or
  // unsupported file, InvalidArgument for bad options.
  static std::shared_ptr<Engine> open(const std::string& path, const EngineOptions& options);

  const GgufFile& file() const { return *model_->file; }
  const Model& model() const { return *model_; }
  const HParams& hparams() const { return model_->hparams; }
  // The vocabulary's tokenizer, built once at open().
  const std::shared_ptr<const Tokenizer>& tokenizer() const { return tokenizer_; }
  const char* backend_name() const { return runner_->backend().name(); }
  int threads() const { return pool_->size(); }

  // A new session of up to max_context positions (1..n_ctx_train). Throws
  // InvalidArgument outside that range.
  std::shared_ptr<Session> new_session(size_t max_context);

  std::unique_ptr<KvState> new_kv_state(size_t max_context) const { return runner_->new_kv_state(max_context); }
  // Host memory for n floats that forwards write (Backend::new_output_buffer).
  HostFloats new_output_buffer(size_t n) const { return runner_->backend().new_output_buffer(n); }

  // The one owner of this engine's accelerator: every forward runs under
  // one of its permits (a decode, a decode group or one prefill chunk).
  AcceleratorScheduler& scheduler() { return scheduler_; }

  // Runs one forward pass (StepRunner::forward's contract) under `permit`,
  // which must be held and come from this engine's scheduler.
  void forward(const Permit& permit, const std::vector<ForwardSegment>& segments);

  // A process-unique id for a new session: its key in the decode rotation.
  uint64_t next_session_id() { return next_session_id_.fetch_add(1); }

  // Tests only: step graphs recorded so far (StepRunner::graphs_built).
  uint64_t graphs_built() const { return runner_->graphs_built(); }

  // Tests only: see FaultInjectingBackend.
  FaultInjectingBackend& faults() { return *faults_; }

 private:
  Engine() = default;

  std::shared_ptr<const Model> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<ThreadPool> pool_;
  FaultInjectingBackend* faults_ = nullptr;  // wraps the backend; owned by runner_
  std::unique_ptr<StepRunner> runner_;
  AcceleratorScheduler scheduler_;
  std::atomic<uint64_t> next_session_id_{1};
};

}  // namespace muser
