// A backend that computes nothing: for scheduler, session and pool tests that
// need a step with controlled timing and repeatable output, not a model.
//
// It runs none of a graph's ops. Its logits are a fixed function of the
// output row's token and position: a ramp that peaks at
// (token + position + 1) mod n_vocab, so greedy decoding produces a known,
// repeatable sequence. Each step sleeps step_seconds (once per step, however
// many rows) plus prefill_seconds_per_row for every row of its multi-row
// segments (prompt chunks; a decode row is a one-row segment), to stand in
// for compute time. Its KV storage holds no bytes (the shared KvState
// bookkeeping still tracks which positions are intact).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace muser {

class NullBackend final : public Backend {
 public:
  // Both times >= 0 and finite; throws InvalidArgument otherwise.
  NullBackend(double step_seconds, double prefill_seconds_per_row = 0.0);

  const char* name() const override { return "null"; }
  void load_weights(const WeightTable&) override {}
  std::unique_ptr<KvStorage> new_kv_storage(const KvLayout& layout) const override;
  void execute(const StepGraph& graph, const StepInputs& inputs) override;

  // The token whose logit the null backend makes largest after `token` at
  // `position` (what greedy decoding picks).
  static uint32_t peak_token(uint32_t n_vocab, int32_t token, size_t position);

 private:
  double step_seconds_;
  double prefill_seconds_per_row_;
};

}  // namespace muser
