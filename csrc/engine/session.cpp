#include "engine/session.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/interrupt.h"
#include "engine/engine.h"

namespace muser {

size_t SessionSnapshot::bytes() const {
  return (kv ? kv->bytes() : 0) + tokens.capacity() * sizeof(int32_t) + logits.capacity() * sizeof(float);
}

Session::Session(std::shared_ptr<Engine> engine, size_t max_context)
    : engine_(std::move(engine)),
      id_(engine_->next_session_id()),
      max_context_(max_context),
      n_vocab_(engine_->hparams().n_vocab),
      logits_(engine_->new_output_buffer(n_vocab_)),
      staged_logits_(engine_->new_output_buffer(n_vocab_)) {
  const size_t limit = engine_->hparams().n_ctx_train;
  if (max_context == 0 || max_context > limit) {
    throw InvalidArgument("[session] max_context: expected 1.." + std::to_string(limit) +
                          " (the model's training context), got " + std::to_string(max_context));
  }
  kv_ = engine_->new_kv_state(max_context);
}

void Session::check_tokens(const int32_t* tokens, size_t n, const char* what) const {
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= n_vocab_) {
      throw InvalidArgument("[session] " + std::string(what) + ": token id " + std::to_string(tokens[i]) +
                            " at index " + std::to_string(i) + " out of range [0, " +
                            std::to_string(n_vocab_) + ")");
    }
  }
  const size_t n_past = history_.size();
  if (n > max_context_ - n_past) {
    throw ContextOverflow("[session] " + std::string(what) + " of " + std::to_string(n) +
                          " tokens at position " + std::to_string(n_past) + " exceeds max_context " +
                          std::to_string(max_context_));
  }
}

void Session::run_chunks(KvState& kv, const int32_t* tokens, size_t n, size_t start, float* logits,
                         const CancelToken* cancel) {
  AcceleratorScheduler& scheduler = engine_->scheduler();
  size_t done = 0;
  uint64_t decode_grants_at_previous_chunk = 0;
  while (done < n) {
    // Chunk boundaries are where a signal (Ctrl-C) or a cancellation may stop
    // the call: what ran so far is dropped by the caller's failure path.
    check_interrupt();
    if (cancel != nullptr && cancel->cancelled()) {
      scheduler.recorder().record_cancelled(0, -1, id_, "prefill");
      throw Cancelled("[session] prefill cancelled");
    }
    Permit permit = scheduler.acquire_prefill(id_);
    // Decided at the boundary, holding the permit (prefill_contended): a
    // decoder waiting or decoding now makes this chunk short.
    const AcceleratorScheduler::DecodeActivity activity = scheduler.decode_activity();
    const bool contended = prefill_contended(scheduler.has_waiting_decode(), activity.active_decoders > 0,
                                             done > 0 && activity.decode_grants != decode_grants_at_previous_chunk,
                                             activity.since_last_decode);
    decode_grants_at_previous_chunk = activity.decode_grants;
    const size_t rows = prefill_chunk_rows(contended, n - done);
    scheduler.record_prefill_chunk(rows, contended);
    ForwardSegment seg;
    seg.kv = &kv;
    seg.tokens = tokens + done;
    seg.n_tokens = rows;
    seg.start = start + done;
    seg.logits = done + rows == n ? logits : nullptr;
    engine_->forward(permit, {seg});
    done += rows;
  }
}

void Session::ensure_resumable() {
  const size_t n_past = history_.size();
  if (kv_->intact(n_past, n_past)) return;
  // Built aside and swapped in only when complete; the rebuilt logits equal
  // the retained ones (same rows, same order), so those stay.
  std::unique_ptr<KvState> fresh = engine_->new_kv_state(max_context_);
  run_chunks(*fresh, history_.data(), n_past, 0, staged_logits_.get());
  kv_ = std::move(fresh);
}

void Session::commit(const int32_t* tokens, size_t n) {
  history_.insert(history_.end(), tokens, tokens + n);  // capacity reserved: cannot throw
  logits_.swap(staged_logits_);
  has_logits_ = true;
}

void Session::append(const int32_t* tokens, size_t n, bool is_decode, const CancelToken* cancel) {
  const size_t n_past = history_.size();
  history_.reserve(n_past + n);  // the only allocation: before any compute
  ensure_resumable();
  try {
    if (is_decode) {
      Permit permit = engine_->scheduler().acquire_decode(id_);
      ForwardSegment seg;
      seg.kv = kv_.get();
      seg.tokens = tokens;
      seg.n_tokens = 1;
      seg.start = n_past;
      seg.logits = staged_logits_.get();
      engine_->forward(permit, {seg});
    } else {
      run_chunks(*kv_, tokens, n, n_past, staged_logits_.get(), cancel);
    }
  } catch (...) {
    kv_->forget_from(n_past);
    throw;
  }
  commit(tokens, n);
}

void Session::prefill(const std::vector<int32_t>& tokens, const CancelToken* cancel) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_tokens(tokens.data(), tokens.size(), "prefill");
  if (tokens.empty()) return;
  append(tokens.data(), tokens.size(), false, cancel);
}

void Session::decode(int32_t token) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_tokens(&token, 1, "decode");
  append(&token, 1, true, nullptr);
}

void Session::check_decode(int32_t token) const {
  std::lock_guard<std::mutex> lock(mutex_);
  check_tokens(&token, 1, "decode");
}

void Session::truncate(size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n_past = history_.size();
  if (n > n_past) {
    throw InvalidArgument("[session] truncate: expected n <= n_past " + std::to_string(n_past) + ", got " +
                          std::to_string(n));
  }
  if (n == n_past) return;
  if (n == 0) {
    kv_->forget_from(0);
    history_.clear();
    has_logits_ = false;
    return;
  }
  if (kv_->intact(n - 1, n)) {
    // Position n - 1 is still cached: recompute its logits without writing.
    ForwardSegment seg;
    seg.kv = kv_.get();
    seg.tokens = history_.data() + (n - 1);
    seg.n_tokens = 1;
    seg.start = n - 1;
    seg.logits = staged_logits_.get();
    seg.replay = true;
    Permit permit = engine_->scheduler().acquire_prefill(id_);
    engine_->forward(permit, {seg});
    kv_->forget_from(n);
  } else {
    // A sliding-window ring has moved past what position n - 1 needs.
    std::unique_ptr<KvState> fresh = engine_->new_kv_state(max_context_);
    run_chunks(*fresh, history_.data(), n, 0, staged_logits_.get());
    kv_ = std::move(fresh);
  }
  history_.resize(n);
  logits_.swap(staged_logits_);
  has_logits_ = true;
}

std::shared_ptr<const SessionSnapshot> Session::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto snap = std::make_shared<SessionSnapshot>();
  snap->engine = engine_;
  snap->max_context = max_context_;
  snap->kv = kv_->clone();
  snap->tokens = history_;
  if (has_logits_) snap->logits.assign(logits_.get(), logits_.get() + n_vocab_);
  return snap;
}

void Session::restore(const SessionSnapshot& snapshot) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (snapshot.engine != engine_ || snapshot.max_context != max_context_ || !snapshot.kv) {
    throw InvalidArgument("[session] restore: the snapshot belongs to another engine or max_context (" +
                          std::to_string(snapshot.max_context) + " vs " + std::to_string(max_context_) + ")");
  }
  // Copies first; the session changes only by swaps and a copy that cannot throw.
  std::unique_ptr<KvState> kv = snapshot.kv->clone();
  std::vector<int32_t> history = snapshot.tokens;
  const bool has_logits = !snapshot.logits.empty();
  if (has_logits && snapshot.logits.size() != n_vocab_) {
    throw InternalError("[session] restore: the snapshot holds " + std::to_string(snapshot.logits.size()) +
                        " logits, the model " + std::to_string(n_vocab_));
  }
  kv_.swap(kv);
  history_.swap(history);
  if (has_logits) std::copy(snapshot.logits.begin(), snapshot.logits.end(), logits_.get());
  has_logits_ = has_logits;
}

size_t Session::n_past() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return history_.size();
}

std::vector<int32_t> Session::tokens() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return history_;
}

bool Session::has_logits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return has_logits_;
}

bool Session::copy_logits(float* out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!has_logits_) return false;
  std::copy(logits_.get(), logits_.get() + n_vocab_, out);
  return true;
}

size_t Session::kv_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kv_->bytes();
}

}  // namespace muser
