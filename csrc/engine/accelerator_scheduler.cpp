#include "engine/accelerator_scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace muser {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t elapsed_ns(Clock::time_point since) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count());
}

}  // namespace

Permit::Permit(Permit&& other) noexcept
    : scheduler_(other.scheduler_), kind_(other.kind_), granted_at_(other.granted_at_) {
  other.scheduler_ = nullptr;
}

Permit& Permit::operator=(Permit&& other) noexcept {
  if (this != &other) {
    release();
    scheduler_ = other.scheduler_;
    kind_ = other.kind_;
    granted_at_ = other.granted_at_;
    other.scheduler_ = nullptr;
  }
  return *this;
}

Permit::~Permit() { release(); }

void Permit::release() {
  if (scheduler_ != nullptr) scheduler_->release(*this);
}

void Permit::poison(const std::string& reason) {
  if (scheduler_ != nullptr) scheduler_->poison(*this, reason);
}

void AcceleratorScheduler::throw_if_poisoned_locked() const {
  if (poisoned_) throw Unhealthy("[scheduler] the accelerator is unhealthy: " + poison_reason_);
}

Permit AcceleratorScheduler::acquire_decode(uint64_t sequence_id) {
  return acquire_decode_group({sequence_id});
}

Permit AcceleratorScheduler::acquire_decode_group(const std::set<uint64_t>& sequence_ids) {
  if (sequence_ids.empty() || sequence_ids.size() > kMaxDecodeGroupRows) {
    throw InvalidArgument("[scheduler] a decode group has 1.." + std::to_string(kMaxDecodeGroupRows) +
                          " distinct sequences, got " + std::to_string(sequence_ids.size()));
  }
  auto started = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  throw_if_poisoned_locked();
  for (uint64_t id : sequence_ids) {
    if (state_.waiting_decode.count(id) != 0) {
      throw InvalidArgument("[scheduler] sequence " + std::to_string(id) + " is already waiting to decode");
    }
  }
  state_.waiting_decode.insert(sequence_ids.begin(), sequence_ids.end());
  // Whatever happens next, this group stops waiting.
  auto leave_queue = [&] {
    for (uint64_t id : sequence_ids) state_.waiting_decode.erase(id);
  };
  changed_.wait(lock, [&] { return poisoned_ || decode_eligible(state_, sequence_ids); });
  if (poisoned_) {
    leave_queue();
    changed_.notify_all();
    throw_if_poisoned_locked();
  }
  record_locked(WorkKind::Decode, sequence_ids);
  state_.last_decode = rotation_cursor_after(state_, sequence_ids);
  leave_queue();
  state_.active = true;
  uint64_t waited = elapsed_ns(started);
  stats_.decode_grants += 1;
  stats_.decode_rows += sequence_ids.size();
  stats_.permit_wait_ns += waited;
  stats_.max_permit_wait_ns = std::max(stats_.max_permit_wait_ns, waited);
  Permit permit(this, WorkKind::Decode);
  permit.granted_at_ = Clock::now();
  return permit;
}

Permit AcceleratorScheduler::acquire_prefill() {
  auto started = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  throw_if_poisoned_locked();
  state_.waiting_prefill += 1;
  changed_.wait(lock, [&] { return poisoned_ || prefill_eligible(state_); });
  state_.waiting_prefill -= 1;
  throw_if_poisoned_locked();
  record_locked(WorkKind::Prefill, {});
  state_.active = true;
  uint64_t waited = elapsed_ns(started);
  stats_.prefill_grants += 1;
  stats_.permit_wait_ns += waited;
  stats_.max_permit_wait_ns = std::max(stats_.max_permit_wait_ns, waited);
  Permit permit(this, WorkKind::Prefill);
  permit.granted_at_ = Clock::now();
  return permit;
}

void AcceleratorScheduler::release(Permit& permit) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    state_.active = false;
    stats_.permit_hold_ns += elapsed_ns(permit.granted_at_);
    if (permit.kind_ == WorkKind::Decode) last_decode_released_ = Clock::now();
  }
  permit.scheduler_ = nullptr;
  changed_.notify_all();
}

void AcceleratorScheduler::poison(Permit& permit, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    poisoned_ = true;
    poison_reason_ = reason;
  }
  release(permit);
}

void AcceleratorScheduler::record_locked(WorkKind kind, const std::set<uint64_t>& granted) {
  if (!record_grants_) return;
  GrantRecord record;
  record.kind = kind;
  record.granted.assign(granted.begin(), granted.end());
  record.waiting_decode.assign(state_.waiting_decode.begin(), state_.waiting_decode.end());
  record.last_decode = state_.last_decode;
  if (grant_log_.size() == kGrantLogCapacity) grant_log_.pop_front();
  grant_log_.push_back(std::move(record));
}

std::vector<GrantRecord> AcceleratorScheduler::grant_log() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {grant_log_.begin(), grant_log_.end()};
}

AcceleratorScheduler::DecodeActivity AcceleratorScheduler::decode_activity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  DecodeActivity out;
  out.decode_grants = stats_.decode_grants;
  if (last_decode_released_) out.since_last_decode = Clock::now() - *last_decode_released_;
  return out;
}

void AcceleratorScheduler::record_prefill_chunk(size_t rows, bool contended) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.prefill_rows += rows;
  if (contended) stats_.prefill_chunks_contended += 1;
}

bool AcceleratorScheduler::has_waiting_decode() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !state_.waiting_decode.empty();
}

bool AcceleratorScheduler::poisoned() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return poisoned_;
}

std::string AcceleratorScheduler::poison_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return poison_reason_;
}

SchedulerStats AcceleratorScheduler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

SchedulerState AcceleratorScheduler::snapshot_state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

}  // namespace muser
