#include "backend/testing/fault_injecting_backend.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace muser {

FaultInjectingBackend::FaultInjectingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {
  if (!inner_) throw InternalError("[fault injection] no backend to wrap");
}

void FaultInjectingBackend::arm(uint64_t steps_to_skip, uint32_t after_layer) {
  after_layer_.store(after_layer);
  countdown_.store(static_cast<int64_t>(steps_to_skip) + 1);
}

void FaultInjectingBackend::execute(const StepGraph& graph, const StepInputs& inputs) {
  const bool fire = countdown_.load() > 0 && countdown_.fetch_sub(1) == 1;
  if (!fire) {
    inner_->execute(graph, inputs);
    return;
  }
  // Run the graph up to the end of the chosen layer (a copy with its own id,
  // so backends compile it separately), then fail.
  const uint32_t layer = after_layer_.load();
  StepGraph cut = graph;
  cut.id = new_graph_id();
  if (layer < graph.layer_end.size()) cut.ops.erase(cut.ops.begin() + static_cast<std::ptrdiff_t>(graph.layer_end[layer]), cut.ops.end());
  inner_->execute(cut, inputs);
  throw InternalError("[" + std::string(inner_->name()) + " backend] injected fault after layer " +
                      std::to_string(layer) + " (test hook)");
}

}  // namespace muser
