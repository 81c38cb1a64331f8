#include "backend/null/null_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "backend/segment_checks.h"
#include "core/error.h"

namespace muser {
namespace {

// The null backend stores no keys or values; it only keeps the bookkeeping
// a session relies on (which positions are intact).
class NullKvState final : public KvState {
 public:
  explicit NullKvState(size_t max_context) : max_context_(max_context) {}

  size_t max_context() const override { return max_context_; }
  bool intact(size_t first_query, size_t end) const override {
    return first_query <= end && end <= intact_end_;
  }
  void forget_from(size_t position) noexcept override { intact_end_ = std::min(intact_end_, position); }
  std::unique_ptr<KvState> clone() const override { return std::make_unique<NullKvState>(*this); }
  size_t bytes() const override { return sizeof(*this); }
  KvExport export_kv(size_t n_past) const override {
    if (!intact(n_past, n_past)) throw InvalidArgument("[null backend] export_kv: positions before n_past not intact");
    KvExport out;
    out.n_past = n_past;
    return out;
  }
  void import_kv(const KvExport& data) override {
    if (!data.layers.empty() || data.n_past > max_context_) {
      throw InvalidArgument("[null backend] import_kv: expected no layers and n_past <= " +
                            std::to_string(max_context_));
    }
    intact_end_ = data.n_past;
  }

  size_t intact_end_ = 0;

 private:
  size_t max_context_;
};

}  // namespace

NullBackend::NullBackend(uint32_t n_vocab, uint32_t n_embd, double step_seconds, double prefill_seconds_per_row)
    : n_vocab_(n_vocab),
      n_embd_(n_embd),
      step_seconds_(step_seconds),
      prefill_seconds_per_row_(prefill_seconds_per_row) {
  if (!(std::isfinite(step_seconds) && step_seconds >= 0)) {
    throw InvalidArgument("[null backend] step_seconds: expected a finite value >= 0, got " +
                          std::to_string(step_seconds));
  }
  if (!(std::isfinite(prefill_seconds_per_row) && prefill_seconds_per_row >= 0)) {
    throw InvalidArgument("[null backend] prefill_seconds_per_row: expected a finite value >= 0, got " +
                          std::to_string(prefill_seconds_per_row));
  }
  if (n_vocab == 0) throw InvalidArgument("[null backend] n_vocab: expected at least 1, got 0");
}

std::unique_ptr<KvState> NullBackend::new_kv_state(size_t max_context) const {
  if (max_context == 0) throw InvalidArgument("[null backend] max_context: expected at least 1, got 0");
  return std::make_unique<NullKvState>(max_context);
}

uint32_t NullBackend::peak_token(uint32_t n_vocab, int32_t token, size_t position) {
  return static_cast<uint32_t>((static_cast<uint64_t>(token) + position + 1) % n_vocab);
}

void NullBackend::forward(const std::vector<ForwardSegment>& segments) {
  check_segments(segments, n_vocab_, "null backend");
  for (const ForwardSegment& seg : segments) {
    if (dynamic_cast<NullKvState*>(seg.kv) == nullptr) {
      throw InternalError("[null backend] forward: KV state of another backend");
    }
  }
  const bool fail = faults.start_forward() >= 0;
  double sleep = step_seconds_;
  for (const ForwardSegment& seg : segments) {
    if (seg.n_tokens > 1) sleep += prefill_seconds_per_row_ * static_cast<double>(seg.n_tokens);
  }
  if (sleep > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
  if (fail) throw InternalError("[null backend] injected fault (test hook)");
  for (const ForwardSegment& seg : segments) {
    auto* kv = static_cast<NullKvState*>(seg.kv);
    size_t last = seg.start + seg.n_tokens - 1;
    if (seg.logits != nullptr) {
      // A ramp down from the peak, wrapping around the vocabulary: every id
      // gets a distinct logit and the peak is unique.
      uint32_t peak = peak_token(n_vocab_, seg.tokens[seg.n_tokens - 1], last);
      float step = 8.0f / static_cast<float>(n_vocab_);
      for (uint32_t v = 0; v < n_vocab_; ++v) {
        uint32_t distance = (v + n_vocab_ - peak) % n_vocab_;
        seg.logits[v] = -step * static_cast<float>(distance);
      }
    }
    if (seg.hidden != nullptr) {
      // Repeatable stand-ins: a function of each row's token and position only.
      for (size_t r = 0; r < seg.n_tokens; ++r) {
        for (uint32_t i = 0; i < n_embd_; ++i) {
          seg.hidden[r * n_embd_ + i] =
              static_cast<float>((static_cast<uint64_t>(seg.tokens[r]) * 31 + (seg.start + r) * 7 + i) % 17) - 8.0f;
        }
      }
    }
    if (!seg.replay) kv->intact_end_ = seg.start + seg.n_tokens;
  }
}

}  // namespace muser
