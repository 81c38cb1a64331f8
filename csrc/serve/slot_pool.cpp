#include "serve/slot_pool.h"

#include <algorithm>

#include "core/error.h"

namespace muser {
namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

std::atomic<uint64_t> next_pool_id{1};

}  // namespace

SlotPool::SlotPool(std::shared_ptr<Engine> engine, size_t n_slots, size_t max_waiting, size_t max_context,
                   std::chrono::microseconds batch_window)
    : engine_(std::move(engine)), id_(next_pool_id.fetch_add(1)), max_context_(max_context),
      admission_(n_slots, max_waiting) {
  admission_.attach_recorder(&recorder(), id_);
  for (size_t i = 0; i < n_slots; ++i) sessions_.push_back(engine_->new_session(max_context));
  staging_ = engine_->new_session(max_context);
  for (size_t i = 0; i < n_slots; ++i) note_kv_bytes(i);
  if (n_slots > 1) {
    batcher_ = std::make_unique<DecodeBatcher>([this](const std::vector<DecodeJob*>& group) { run_group(group); },
                                               batch_window, std::min(n_slots, kMaxDecodeGroupRows));
  }
}

SlotPool::~SlotPool() {
  for (auto& decoding : decoding_) {
    if (decoding.exchange(false)) engine_->scheduler().decoder_finished();
  }
}

void SlotPool::check_slot(size_t slot) const {
  if (slot >= sessions_.size()) {
    throw InvalidArgument("[slot_pool] slot " + std::to_string(slot) + " out of range [0, " +
                          std::to_string(sessions_.size()) + ")");
  }
}

void SlotPool::throw_if_unhealthy() const {
  if (!admission_.healthy()) throw Unhealthy("[slot_pool] the pool is unhealthy: " + admission_.unhealthy_reason());
}

void SlotPool::note_kv_bytes(size_t slot) {
  kv_bytes_[slot].store(session(slot)->kv_bytes(), std::memory_order_relaxed);
}

std::shared_ptr<Session> SlotPool::session(size_t slot) const {
  check_slot(slot);
  std::lock_guard<std::mutex> lock(sessions_mutex_);
  return sessions_[slot];
}

SlotLease SlotPool::acquire(const std::vector<int32_t>& prompt, std::optional<std::chrono::nanoseconds> timeout,
                            const CancelTokenPtr& cancel) {
  // Histories of free slots cannot change while we look: nobody owns them.
  std::function<SlotAffinity(size_t)> affinity = [&](size_t slot) {
    std::vector<int32_t> history = session(slot)->tokens();
    return SlotAffinity{common_prefix(history, prompt), history.size()};
  };
  SlotLease lease;
  lease.slot = admission_.acquire(timeout, cancel, affinity);
  try {
    std::shared_ptr<Session> s = session(lease.slot);
    const size_t keep = common_prefix(s->tokens(), prompt);
    // The slot's state is unknown after these, and so may be the accelerator's
    // (the same rule as a lease ending with them).
    auto latch = [&](const std::exception& e) {
      admission_.mark_unhealthy(std::string("rewinding slot ") + std::to_string(lease.slot) +
                                " for a new request failed: " + e.what());
    };
    try {
      s->truncate(keep);  // keep == n_past changes nothing; else recomputes the logits at keep - 1
    } catch (const InternalError& e) {
      latch(e);
      throw;
    } catch (const Unhealthy& e) {
      latch(e);
      throw;
    }
    lease.reused_tokens = keep;
    reused_prefix_tokens_ += keep;
    (keep > 0 ? prefix_hits_ : prefix_misses_) += 1;
    note_kv_bytes(lease.slot);
    if (recorder().on()) {
      ScheduleEvent event;
      event.kind = ScheduleEventKind::Leased;
      event.pool = id_;
      event.slot = static_cast<int64_t>(lease.slot);
      event.sessions.push_back(s->id());
      event.rows = keep;
      recorder().record(std::move(event));
    }
  } catch (...) {
    if (recorder().on()) {
      ScheduleEvent event;
      event.kind = ScheduleEventKind::LeaseReleased;
      event.pool = id_;
      event.slot = static_cast<int64_t>(lease.slot);
      event.what = "failed";
      recorder().record(std::move(event));
    }
    admission_.release(lease.slot);
    throw;
  }
  // Every leased slot may send a row: the batcher waits (within its window)
  // for as many rows as there are leases, whoever drives them.
  if (batcher_) batcher_->add_participant();
  return lease;
}

void SlotPool::release(size_t slot, bool healthy) {
  check_slot(slot);
  if (!healthy) admission_.mark_unhealthy("a lease on slot " + std::to_string(slot) + " ended in an unknown state");
  if (recorder().on()) {
    // Before the slot is free: its next lease is recorded after this release.
    ScheduleEvent event;
    event.kind = ScheduleEventKind::LeaseReleased;
    event.pool = id_;
    event.slot = static_cast<int64_t>(slot);
    event.what = healthy ? "healthy" : "unhealthy";
    recorder().record(std::move(event));
  }
  admission_.release(slot);  // throws for a slot that is not held, before the counts change
  if (batcher_) batcher_->remove_participant();
  if (decoding_[slot].exchange(false)) engine_->scheduler().decoder_finished();
}

void SlotPool::prefill(size_t slot, const std::vector<int32_t>& tokens, const CancelToken* cancel) {
  throw_if_unhealthy();
  std::shared_ptr<Session> s = session(slot);
  s->prefill(tokens, cancel);
  note_kv_bytes(slot);
}

void SlotPool::run_group(const std::vector<DecodeJob*>& group) {
  // A row that cannot run fails alone; the others run as one group.
  std::vector<Session*> sessions;
  std::vector<int32_t> tokens;
  for (DecodeJob* job : group) {
    Session* s = static_cast<Session*>(job->payload);
    try {
      s->check_decode(job->token);
    } catch (const InvalidArgument&) {
      job->error = std::current_exception();
      continue;
    } catch (const ContextOverflow&) {
      job->error = std::current_exception();
      continue;
    }
    sessions.push_back(s);
    tokens.push_back(job->token);
  }
  if (sessions.empty()) return;
  if (recorder().on()) {
    ScheduleEvent event;
    event.kind = ScheduleEventKind::DecodeGroup;
    event.pool = id_;
    event.rows = sessions.size();
    for (size_t i = 0, row = 0; i < group.size(); ++i) {
      if (group[i]->error) continue;  // failed alone, above
      event.slots.push_back(static_cast<int64_t>(group[i]->slot_id));
      event.sessions.push_back(sessions[row++]->id());
    }
    recorder().record(std::move(event));
  }
  Session::decode_group(sessions, tokens);
}

void SlotPool::decode(size_t slot, int32_t token, const CancelTokenPtr& cancel) {
  throw_if_unhealthy();
  std::shared_ptr<Session> s = session(slot);
  if (cancel && cancel->cancelled()) {
    recorder().record_cancelled(id_, static_cast<int64_t>(slot), s->id(), "decode");
    throw Cancelled("[slot_pool] the request was cancelled");
  }
  if (!decoding_[slot].exchange(true)) engine_->scheduler().decoder_started();
  if (!batcher_) {
    s->decode(token);
    note_kv_bytes(slot);
    return;
  }
  DecodeJob job;
  job.slot_id = slot;
  job.token = token;
  job.payload = s.get();
  job.cancel = cancel;
  try {
    batcher_->submit(job);
  } catch (const Cancelled&) {
    recorder().record_cancelled(id_, static_cast<int64_t>(slot), s->id(), "decode_queue");
    throw;
  }
  note_kv_bytes(slot);
}

size_t SlotPool::context_shift(size_t slot, size_t n_keep, const CancelToken* cancel) {
  throw_if_unhealthy();
  std::lock_guard<std::mutex> staging_lock(staging_mutex_);
  std::shared_ptr<Session> current = session(slot);
  const std::vector<int32_t> history = current->tokens();
  if (n_keep > history.size()) {
    throw InvalidArgument("[slot_pool] context_shift: n_keep " + std::to_string(n_keep) + " exceeds n_past " +
                          std::to_string(history.size()));
  }
  const size_t rest = history.size() - n_keep;
  std::vector<int32_t> shifted(history.begin(), history.begin() + static_cast<std::ptrdiff_t>(n_keep));
  shifted.insert(shifted.end(), history.end() - static_cast<std::ptrdiff_t>(rest - rest / 2), history.end());
  staging_->truncate(0);
  staging_->prefill(shifted, cancel);
  {
    std::lock_guard<std::mutex> lock(sessions_mutex_);
    std::swap(sessions_[slot], staging_);
  }
  context_shifts_ += 1;
  note_kv_bytes(slot);
  return shifted.size();
}

void SlotPool::arm_batcher_fault() {
  if (!batcher_) throw InvalidArgument("[slot_pool] a one-slot pool has no batcher");
  batcher_->arm_bookkeeping_fault();
}

PoolStats SlotPool::stats() const {
  PoolStats out;
  out.admission = admission_.stats();
  if (batcher_) out.batcher = batcher_->stats();
  out.reused_prefix_tokens = reused_prefix_tokens_.load();
  out.prefix_hits = prefix_hits_.load();
  out.prefix_misses = prefix_misses_.load();
  out.context_shifts = context_shifts_.load();
  for (size_t i = 0; i < sessions_.size(); ++i) out.kv_bytes += kv_bytes_[i].load(std::memory_order_relaxed);
  return out;
}

}  // namespace muser
