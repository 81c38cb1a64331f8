// A backend that computes nothing: for scheduler, session and pool tests that
// need a forward with controlled timing and repeatable output, not a model.
//
// Its logits are a fixed function of the row's token and position: a ramp
// that peaks at (token + position + 1) mod n_vocab, so greedy decoding
// produces a known, repeatable sequence. Each forward sleeps step_seconds
// (once per call, however many rows) plus prefill_seconds_per_row for every
// row of its multi-row segments (prompt chunks; a decode row is a one-row
// segment), to stand in for compute time.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace muser {

class NullBackend final : public Backend {
 public:
  // Both times >= 0 and finite; throws InvalidArgument otherwise.
  NullBackend(uint32_t n_vocab, uint32_t n_embd, double step_seconds, double prefill_seconds_per_row = 0.0);

  const char* name() const override { return "null"; }
  std::unique_ptr<KvState> new_kv_state(size_t max_context) const override;
  void forward(const std::vector<ForwardSegment>& segments) override;

  // The token whose logit the null backend makes largest after `token` at
  // `position` (what greedy decoding picks).
  static uint32_t peak_token(uint32_t n_vocab, int32_t token, size_t position);

 private:
  uint32_t n_vocab_;
  uint32_t n_embd_;
  double step_seconds_;
  double prefill_seconds_per_row_;
};

}  // namespace muser
