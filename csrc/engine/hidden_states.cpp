#include "engine/hidden_states.h"

#include <algorithm>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/interrupt.h"
#include "engine/engine.h"
#include "engine/scheduling_policy.h"

namespace muser {

std::vector<std::vector<float>> compute_hidden_states(Engine& engine, const std::vector<std::vector<int32_t>>& texts,
                                                      const CancelToken* cancel) {
  const HParams& hp = engine.hparams();
  size_t remaining = 0;
  for (size_t t = 0; t < texts.size(); ++t) {
    const size_t n = texts[t].size();
    if (n == 0 || n > hp.n_ctx_train) {
      throw InvalidArgument("[hidden_states] text " + std::to_string(t) + ": expected 1.." +
                            std::to_string(hp.n_ctx_train) + " tokens, got " + std::to_string(n));
    }
    for (int32_t id : texts[t]) {
      if (id < 0 || static_cast<uint32_t>(id) >= hp.n_vocab) {
        throw InvalidArgument("[hidden_states] text " + std::to_string(t) + ": token id " + std::to_string(id) +
                              " out of range [0, " + std::to_string(hp.n_vocab) + ")");
      }
    }
    remaining += n;
  }
  std::vector<std::vector<float>> out(texts.size());
  std::vector<std::unique_ptr<KvState>> kv(texts.size());
  for (size_t t = 0; t < texts.size(); ++t) {
    out[t].resize(texts[t].size() * hp.n_embd);
    kv[t] = engine.new_kv_state(texts[t].size());
  }
  AcceleratorScheduler& scheduler = engine.scheduler();
  size_t next_text = 0, next_row = 0;  // where the next forward starts
  bool first_chunk = true;
  uint64_t decode_grants_at_previous_chunk = 0;
  while (remaining > 0) {
    check_interrupt();  // Ctrl-C between chunks (core/interrupt.h)
    if (cancel != nullptr && cancel->cancelled()) throw Cancelled("[hidden_states] cancelled");
    Permit permit = scheduler.acquire_prefill();
    // The same chunk rule as Session::prefill (prefill_contended).
    const AcceleratorScheduler::DecodeActivity activity = scheduler.decode_activity();
    const bool contended = prefill_contended(scheduler.has_waiting_decode(), activity.active_decoders > 0,
                                             !first_chunk && activity.decode_grants != decode_grants_at_previous_chunk,
                                             activity.since_last_decode);
    first_chunk = false;
    decode_grants_at_previous_chunk = activity.decode_grants;
    const size_t budget = prefill_chunk_rows(contended, remaining);
    std::vector<ForwardSegment> segments;
    std::vector<size_t> finished;
    size_t rows = 0;
    while (rows < budget && next_text < texts.size()) {
      const std::vector<int32_t>& text = texts[next_text];
      const size_t take = std::min(budget - rows, text.size() - next_row);
      ForwardSegment seg;
      seg.kv = kv[next_text].get();
      seg.tokens = text.data() + next_row;
      seg.n_tokens = take;
      seg.start = next_row;
      seg.hidden = out[next_text].data() + next_row * hp.n_embd;
      segments.push_back(seg);
      rows += take;
      next_row += take;
      if (next_row == text.size()) {
        finished.push_back(next_text);
        ++next_text;
        next_row = 0;
      }
    }
    scheduler.record_prefill_chunk(rows, contended);
    engine.forward(permit, segments);
    remaining -= rows;
    for (size_t t : finished) kv[t].reset();  // done: its KV memory goes back now, not at the end
  }
  return out;
}

}  // namespace muser
