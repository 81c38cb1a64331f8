#include "engine/schedule_recorder.h"

#include "core/error.h"

namespace muser {

const char* schedule_event_kind_name(ScheduleEventKind kind) {
  switch (kind) {
    case ScheduleEventKind::PermitRequested: return "permit_requested";
    case ScheduleEventKind::PermitGranted: return "permit_granted";
    case ScheduleEventKind::PermitReleased: return "permit_released";
    case ScheduleEventKind::PermitRefused: return "permit_refused";
    case ScheduleEventKind::PrefillChunk: return "prefill_chunk";
    case ScheduleEventKind::AdmissionRequested: return "admission_requested";
    case ScheduleEventKind::Admitted: return "admitted";
    case ScheduleEventKind::AdmissionRefused: return "admission_refused";
    case ScheduleEventKind::Leased: return "leased";
    case ScheduleEventKind::LeaseReleased: return "lease_released";
    case ScheduleEventKind::DecodeGroup: return "decode_group";
    case ScheduleEventKind::Cancelled: return "cancelled";
    case ScheduleEventKind::Note: return "note";
  }
  return "unknown";
}

void ScheduleRecorder::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (on_.load(std::memory_order_relaxed)) {
    throw InvalidArgument("[schedule] this engine is already recording its schedule (one recording at a time)");
  }
  events_.clear();
  next_seq_ = 0;
  dropped_ = 0;
  origin_ = std::chrono::steady_clock::now();
  on_.store(true, std::memory_order_relaxed);
}

std::vector<ScheduleEvent> ScheduleRecorder::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  on_.store(false, std::memory_order_relaxed);
  return events_;
}

std::vector<ScheduleEvent> ScheduleRecorder::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

uint64_t ScheduleRecorder::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

void ScheduleRecorder::record(ScheduleEvent event) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Checked again under the lock: stop() may have run since the caller's check.
  if (!on_.load(std::memory_order_relaxed)) return;
  if (events_.size() >= kMaxEvents) {
    dropped_ += 1;
    return;
  }
  // Stamped under the lock, so time never runs backwards along seq.
  event.seq = next_seq_++;
  event.time_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count();
  events_.push_back(std::move(event));
}

void ScheduleRecorder::record_cancelled(uint64_t pool, int64_t slot, uint64_t session, const char* where) {
  if (!on()) return;
  ScheduleEvent event;
  event.kind = ScheduleEventKind::Cancelled;
  event.pool = pool;
  event.slot = slot;
  if (session != 0) event.sessions.push_back(session);
  event.what = where;
  record(std::move(event));
}

}  // namespace muser
