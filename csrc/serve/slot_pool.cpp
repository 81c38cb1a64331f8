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
  if (n_slots > 1) {
    batcher_ = std::make_unique<DecodeBatcher>([this](const std::vector<DecodeJob*>& group) { run_group(group); },
                                               batch_window, std::min(n_slots, kMaxDecodeGroupRows));
  }
}

void SlotPool::check_slot(size_t slot) const {
  if (slot >= sessions_.size()) {
    throw InvalidArgument("[slot_pool] slot " + std::to_string(slot) + " out of range [0, " +
                          std::to_string(sessions_.size()) + ")");
  }
}

std::shared_ptr<Session> SlotPool::session(size_t slot) const {
  check_slot(slot);
  std::lock_guard<std::mutex> lock(sessions_mutex_);
  return sessions_[slot];
}

SlotLease SlotPool::acquire(const std::vector<int32_t>& prompt, std::optional<std::chrono::nanoseconds> timeout,
                            const CancelTokenPtr& cancel) {
  // Histories of free slots cannot change while we look: nobody owns them.
  auto affinity = [&](size_t slot) {
    std::vector<int32_t> history = session(slot)->tokens();
    return SlotAffinity{common_prefix(history, prompt), history.size()};
  };
  SlotLease lease;
  lease.slot = admission_.acquire(timeout, cancel, affinity);
  try {
    std::shared_ptr<Session> s = session(lease.slot);
    const size_t keep = common_prefix(s->tokens(), prompt);
    s->truncate(keep);  // keep == n_past changes nothing; else recomputes the logits at keep - 1
    lease.reused_tokens = keep;
    reused_prefix_tokens_ += keep;
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
  admission_.release(slot);
}

void SlotPool::run_group(const std::vector<DecodeJob*>& group) {
  std::vector<Session*> sessions;
  std::vector<int32_t> tokens;
  for (const DecodeJob* job : group) {
    sessions.push_back(static_cast<Session*>(job->payload));
    tokens.push_back(job->token);
  }
  if (recorder().on()) {
    ScheduleEvent event;
    event.kind = ScheduleEventKind::DecodeGroup;
    event.pool = id_;
    event.rows = group.size();
    for (size_t i = 0; i < group.size(); ++i) {
      event.slots.push_back(static_cast<int64_t>(group[i]->slot_id));
      event.sessions.push_back(sessions[i]->id());
    }
    recorder().record(std::move(event));
  }
  Session::decode_group(sessions, tokens);
}

void SlotPool::decode(size_t slot, int32_t token, const CancelTokenPtr& cancel) {
  std::shared_ptr<Session> s = session(slot);
  if (cancel && cancel->cancelled()) {
    recorder().record_cancelled(id_, static_cast<int64_t>(slot), s->id(), "decode");
    throw Cancelled("[slot_pool] the request was cancelled");
  }
  if (!batcher_) {
    s->decode(token);
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
}

void SlotPool::begin_decoding() {
  if (batcher_) batcher_->add_participant();
}

void SlotPool::end_decoding() {
  if (batcher_) batcher_->remove_participant();
}

size_t SlotPool::context_shift(size_t slot, size_t n_keep, const CancelToken* cancel) {
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
  return shifted.size();
}

PoolStats SlotPool::stats() const {
  PoolStats out;
  out.admission = admission_.stats();
  if (batcher_) out.batcher = batcher_->stats();
  out.reused_prefix_tokens = reused_prefix_tokens_.load();
  out.context_shifts = context_shifts_.load();
  return out;
}

}  // namespace muser
