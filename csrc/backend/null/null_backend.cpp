#include "backend/null/null_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "backend/registry.h"
#include "core/error.h"

namespace muser {
namespace {

class NullKvStorage final : public KvStorage {
 public:
  bool holds_rows() const override { return false; }
  void grow(size_t, size_t) override {}
  std::unique_ptr<KvStorage> clone(size_t) const override { return std::make_unique<NullKvStorage>(); }
  std::unique_ptr<KvStorage> empty() const override { return std::make_unique<NullKvStorage>(); }
  size_t bytes() const override { return sizeof(*this); }
  void read_row(uint32_t, size_t, uint16_t*, uint16_t*) const override {
    throw InternalError("[null backend] the null KV storage holds no rows");
  }
  void write_row(uint32_t, size_t, const uint16_t*, const uint16_t*) override {
    throw InternalError("[null backend] the null KV storage holds no rows");
  }
};

// Never chosen by "auto" (priority 0): it computes no model.
const BackendRegistration registration(
    "null", 0, [] { return std::string(); },
    [](const BackendContext& context) {
      return std::make_unique<NullBackend>(context.null_step_seconds, context.null_prefill_seconds_per_row);
    });

}  // namespace

NullBackend::NullBackend(double step_seconds, double prefill_seconds_per_row)
    : step_seconds_(step_seconds), prefill_seconds_per_row_(prefill_seconds_per_row) {
  if (!(std::isfinite(step_seconds) && step_seconds >= 0)) {
    throw InvalidArgument("[null backend] step_seconds: expected a finite value >= 0, got " +
                          std::to_string(step_seconds));
  }
  if (!(std::isfinite(prefill_seconds_per_row) && prefill_seconds_per_row >= 0)) {
    throw InvalidArgument("[null backend] prefill_seconds_per_row: expected a finite value >= 0, got " +
                          std::to_string(prefill_seconds_per_row));
  }
}

std::unique_ptr<KvStorage> NullBackend::new_kv_storage(const KvLayout&) const {
  return std::make_unique<NullKvStorage>();
}

uint32_t NullBackend::peak_token(uint32_t n_vocab, int32_t token, size_t position) {
  return static_cast<uint32_t>((static_cast<uint64_t>(token) + position + 1) % n_vocab);
}

void NullBackend::execute(const StepGraph& graph, const StepInputs& inputs) {
  for (const KvState* kv : inputs.slots) {
    if (dynamic_cast<const NullKvStorage*>(&kv->storage()) == nullptr) {
      throw InternalError("[null backend] execute: KV state of another backend");
    }
  }
  // Rows per slot: a slot of several rows is a prompt chunk.
  double sleep = step_seconds_;
  for (size_t s = 0; s < inputs.slots.size(); ++s) {
    const size_t rows = static_cast<size_t>(std::count(inputs.row_slot.begin(), inputs.row_slot.end(), s));
    if (rows > 1) sleep += prefill_seconds_per_row_ * static_cast<double>(rows);
  }
  if (sleep > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
  const uint32_t n_vocab = static_cast<uint32_t>(graph.tensor(graph.logits).cols);
  for (size_t i = 0; i < inputs.outputs.size(); ++i) {
    const size_t row = static_cast<size_t>(inputs.output_rows[i]);
    // A ramp down from the peak, wrapping around the vocabulary: every id
    // gets a distinct logit and the peak is unique.
    const uint32_t peak = peak_token(n_vocab, inputs.tokens[row], static_cast<size_t>(inputs.positions[row]));
    const float step = 8.0f / static_cast<float>(n_vocab);
    float* logits = inputs.outputs[i];
    for (uint32_t v = 0; v < n_vocab; ++v) {
      const uint32_t distance = (v + n_vocab - peak) % n_vocab;
      logits[v] = -step * static_cast<float>(distance);
    }
  }
  if (graph.hidden != kNoTensor) {
    // Repeatable stand-ins: a function of each row's token and position only.
    const size_t n_embd = graph.tensor(graph.hidden).cols;
    for (size_t r = 0; r < inputs.hidden.size(); ++r) {
      float* out = inputs.hidden[r];
      if (out == nullptr) continue;
      const uint64_t token = static_cast<uint64_t>(inputs.tokens[r]);
      const uint64_t position = static_cast<uint64_t>(inputs.positions[r]);
      for (size_t i = 0; i < n_embd; ++i) out[i] = static_cast<float>((token * 31 + position * 7 + i) % 17) - 8.0f;
    }
  }
}

}  // namespace muser
