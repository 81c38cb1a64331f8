// A test backend that wraps another: inert unless armed, it then makes one
// future step throw InternalError part-way through, after the wrapped
// backend has really written the KV of the first layers, so tests can check
// the failure guarantees of the layers above on a genuine partial write.
// The wrapped backend knows nothing of this (the hook is not part of the
// Backend interface).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace muser {

class FaultInjectingBackend final : public Backend {
 public:
  explicit FaultInjectingBackend(std::unique_ptr<Backend> inner);

  // The step after `steps_to_skip` further steps fails once it has computed
  // (and written the KV of) layer `after_layer`.
  void arm(uint64_t steps_to_skip, uint32_t after_layer);

  const char* name() const override { return inner_->name(); }
  void load_weights(const WeightTable& weights) override { inner_->load_weights(weights); }
  std::unique_ptr<KvStorage> new_kv_storage(const KvLayout& layout) const override {
    return inner_->new_kv_storage(layout);
  }
  HostFloats new_output_buffer(size_t n) const override { return inner_->new_output_buffer(n); }
  void execute(const StepGraph& graph, const StepInputs& inputs) override;

 private:
  std::unique_ptr<Backend> inner_;
  std::atomic<int64_t> countdown_{0};
  std::atomic<uint32_t> after_layer_{0};
};

}  // namespace muser
