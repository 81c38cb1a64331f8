// The backends a build of muser contains, found by name. Each backend file
// registers itself (a static BackendRegistration); the registry also knows
// the names of backends this build may lack ("cuda", "metal") so that
// asking for one says why it cannot run instead of "unknown backend".
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace muser {

// What a backend factory may use.
struct BackendContext {
  std::shared_ptr<ThreadPool> pool;  // the engine's compute threads
  double null_step_seconds = 0.0;    // the null backend's per-step sleep
  double null_prefill_seconds_per_row = 0.0;  // and its extra sleep per prompt row
};

struct BackendInfo {
  std::string name;
  bool usable = false;
  std::string reason;  // why not, when !usable
};

struct BackendRegistration {
  // `priority`: "auto" takes the usable backend with the highest priority
  // (0 or less: never chosen by "auto"). `probe` returns "" when usable here,
  // else why not ("no CUDA device").
  BackendRegistration(const char* name, int priority, std::function<std::string()> probe,
                      std::function<std::unique_ptr<Backend>(const BackendContext&)> create);
};

// Every known backend, in a fixed order (registered ones by priority, then
// known names this build lacks), with whether it can run here.
std::vector<BackendInfo> list_backends();

// The name `requested` resolves to: itself if usable, the best usable one for
// "auto". Throws InvalidArgument naming the reason for an unusable or
// unknown name (never falls back silently).
std::string resolve_backend(const std::string& requested);

std::unique_ptr<Backend> create_backend(const std::string& name, const BackendContext& context);

}  // namespace muser
