#include "engine/engine.h"

#include "backend/accelerators.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/null/null_backend.h"
#include "core/error.h"
#include "engine/session.h"

namespace muser {

std::shared_ptr<Engine> Engine::open(const std::string& path, const EngineOptions& options) {
  const std::string& kind = options.backend;
  if (kind != "auto" && kind != "cpu" && kind != "null") throw_backend_unavailable(kind);
  if (options.threads < 0) {
    throw InvalidArgument("[engine] threads: expected a positive count (or None), got " +
                          std::to_string(options.threads));
  }
  std::shared_ptr<Engine> engine(new Engine());
  engine->model_ = Model::load(GgufFile::open(path));
  engine->tokenizer_ = Tokenizer::from_gguf(*engine->model_->file);
  int threads = options.threads == 0 ? physical_core_count() : options.threads;
  engine->pool_ = std::make_shared<ThreadPool>(threads);
  if (kind == "null") {
    engine->backend_ = std::make_unique<NullBackend>(engine->hparams().n_vocab, engine->hparams().n_embd,
                                                     options.null_step_seconds, options.null_prefill_seconds_per_row);
  } else {
    // "auto" is the CPU until an accelerator backend is built in.
    engine->backend_ = std::make_unique<CpuBackend>(engine->model_, engine->pool_);
  }
  return engine;
}

std::shared_ptr<Session> Engine::new_session(size_t max_context) {
  return std::make_shared<Session>(shared_from_this(), max_context);
}

void Engine::forward(const Permit& permit, const std::vector<ForwardSegment>& segments) {
  if (!permit.held()) throw InternalError("[engine] forward without an accelerator permit");
  backend_->forward(segments);
}

}  // namespace muser
