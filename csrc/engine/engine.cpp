#include "engine/engine.h"

#include "backend/registry.h"
#include "core/error.h"
#include "engine/session.h"

namespace muser {

std::shared_ptr<Engine> Engine::open(const std::string& path, const EngineOptions& options) {
  const std::string backend = resolve_backend(options.backend);
  if (options.threads < 0) {
    throw InvalidArgument("[engine] threads: expected a positive count (or None), got " +
                          std::to_string(options.threads));
  }
  std::shared_ptr<Engine> engine(new Engine());
  engine->model_ = Model::load(GgufFile::open(path));
  engine->tokenizer_ = Tokenizer::from_gguf(*engine->model_->file);
  int threads = options.threads == 0 ? physical_core_count() : options.threads;
  engine->pool_ = std::make_shared<ThreadPool>(threads);
  BackendContext context;
  context.pool = engine->pool_;
  context.null_step_seconds = options.null_step_seconds;
  context.null_prefill_seconds_per_row = options.null_prefill_seconds_per_row;
  auto faults = std::make_unique<FaultInjectingBackend>(create_backend(backend, context));
  engine->faults_ = faults.get();
  engine->runner_ = std::make_unique<StepRunner>(engine->model_, std::move(faults));
  return engine;
}

std::shared_ptr<Session> Engine::new_session(size_t max_context) {
  return std::make_shared<Session>(shared_from_this(), max_context);
}

void Engine::forward(const Permit& permit, const std::vector<ForwardSegment>& segments) {
  if (!permit.held()) throw InternalError("[engine] forward without an accelerator permit");
  runner_->forward(segments);
}

}  // namespace muser
