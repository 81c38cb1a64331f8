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

// Schedule-recording hooks. Called with the scheduler's lock held, so the
// recorded order of requests, grants and releases is their true order.
uint64_t record_requested(ScheduleRecorder& recorder, WorkKind kind, const std::set<uint64_t>& sessions) {
  if (!recorder.on()) return 0;
  ScheduleEvent event;
  event.kind = ScheduleEventKind::PermitRequested;
  event.subject = recorder.next_permit_id();
  event.what = kind == WorkKind::Decode ? "decode" : "prefill";
  event.sessions.assign(sessions.begin(), sessions.end());
  event.rows = kind == WorkKind::Decode ? sessions.size() : 0;
  const uint64_t id = event.subject;
  recorder.record(std::move(event));
  return id;
}

void record_permit_event(ScheduleRecorder& recorder, ScheduleEventKind kind, uint64_t permit_id, uint64_t rows = 0,
                         std::string what = {}) {
  if (permit_id == 0 || !recorder.on()) return;
  ScheduleEvent event;
  event.kind = kind;
  event.subject = permit_id;
  event.rows = rows;
  event.what = std::move(what);
  recorder.record(std::move(event));
}

}  // namespace

Permit::Permit(Permit&& other) noexcept
    : scheduler_(other.scheduler_), kind_(other.kind_), granted_at_(other.granted_at_),
      record_id_(other.record_id_) {
  other.scheduler_ = nullptr;
}

Permit& Permit::operator=(Permit&& other) noexcept {
  if (this != &other) {
    release();
    scheduler_ = other.scheduler_;
    kind_ = other.kind_;
    granted_at_ = other.granted_at_;
    record_id_ = other.record_id_;
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
  const uint64_t record_id = record_requested(recorder_, WorkKind::Decode, sequence_ids);
  // Whatever happens next, this group stops waiting.
  auto leave_queue = [&] {
    for (uint64_t id : sequence_ids) state_.waiting_decode.erase(id);
  };
  changed_.wait(lock, [&] { return poisoned_ || decode_eligible(state_, sequence_ids); });
  if (poisoned_) {
    leave_queue();
    changed_.notify_all();
    record_permit_event(recorder_, ScheduleEventKind::PermitRefused, record_id, 0, "unhealthy");
    throw_if_poisoned_locked();
  }
  record_permit_event(recorder_, ScheduleEventKind::PermitGranted, record_id, sequence_ids.size());
  active_record_id_ = record_id;
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
  permit.record_id_ = record_id;
  return permit;
}

Permit AcceleratorScheduler::acquire_prefill(uint64_t session_id) {
  auto started = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  throw_if_poisoned_locked();
  state_.waiting_prefill += 1;
  const uint64_t record_id = record_requested(
      recorder_, WorkKind::Prefill, session_id != 0 ? std::set<uint64_t>{session_id} : std::set<uint64_t>{});
  changed_.wait(lock, [&] { return poisoned_ || prefill_eligible(state_); });
  state_.waiting_prefill -= 1;
  if (poisoned_) record_permit_event(recorder_, ScheduleEventKind::PermitRefused, record_id, 0, "unhealthy");
  throw_if_poisoned_locked();
  record_permit_event(recorder_, ScheduleEventKind::PermitGranted, record_id);
  active_record_id_ = record_id;
  state_.active = true;
  uint64_t waited = elapsed_ns(started);
  stats_.prefill_grants += 1;
  stats_.permit_wait_ns += waited;
  stats_.max_permit_wait_ns = std::max(stats_.max_permit_wait_ns, waited);
  Permit permit(this, WorkKind::Prefill);
  permit.granted_at_ = Clock::now();
  permit.record_id_ = record_id;
  return permit;
}

void AcceleratorScheduler::release(Permit& permit) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    state_.active = false;
    stats_.permit_hold_ns += elapsed_ns(permit.granted_at_);
    if (permit.kind_ == WorkKind::Decode) last_decode_released_ = Clock::now();
    record_permit_event(recorder_, ScheduleEventKind::PermitReleased, permit.record_id_);
    active_record_id_ = 0;
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

AcceleratorScheduler::DecodeActivity AcceleratorScheduler::decode_activity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  DecodeActivity out;
  out.decode_grants = stats_.decode_grants;
  if (last_decode_released_) out.since_last_decode = Clock::now() - *last_decode_released_;
  out.active_decoders = active_decoders_;
  return out;
}

void AcceleratorScheduler::decoder_started() {
  std::lock_guard<std::mutex> lock(mutex_);
  active_decoders_ += 1;
}

void AcceleratorScheduler::decoder_finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (active_decoders_ > 0) active_decoders_ -= 1;
}

void AcceleratorScheduler::record_prefill_chunk(size_t rows, bool contended) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.prefill_rows += rows;
  if (contended) stats_.prefill_chunks_contended += 1;
  record_permit_event(recorder_, ScheduleEventKind::PrefillChunk, active_record_id_, rows,
                      contended ? "contended" : "idle");
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
