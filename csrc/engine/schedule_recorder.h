// ScheduleRecorder: an event log of one engine's scheduling, for tests of
// fairness (muser.testing: `with engine.record_schedule() as log:`).
//
// What is recorded, each event stamped with a sequence number and a time:
// - the AcceleratorScheduler's permits: requested (entered the queue),
//   granted, released, refused (poisoned); prefill chunk sizes;
// - SlotAdmission of every pool on the engine: requested, admitted, refused;
// - SlotPool: leases (slot, session, reused prefix), decode groups (slots and
//   sessions in rotation order), lease releases, cancellations;
// - notes from the Python generation loop (a request started, got its slot,
//   ended with an outcome).
//
// Ordering: events recorded under the scheduler's lock (permits) are in their
// true order among themselves, as are those recorded under one pool's
// admission lock; `seq` is the order in which events reached the log.
//
// Cost when off: every hook is `if (recorder.on())`, one relaxed atomic load;
// nothing is allocated or locked. When on, one mutex and one vector push
// per event.
//
// Thread safety: all members may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace muser {

enum class ScheduleEventKind : uint8_t {
  PermitRequested,     // subject: permit id; what: "decode"/"prefill"; sessions
  PermitGranted,       // subject: permit id; rows (decode: group size)
  PermitReleased,      // subject: permit id
  PermitRefused,       // subject: permit id; what: reason (the scheduler is unhealthy)
  PrefillChunk,        // subject: permit id; rows; what: "contended" or "idle"
  AdmissionRequested,  // subject: ticket (arrival order within its pool); pool
  Admitted,            // subject: ticket; pool; slot
  AdmissionRefused,    // subject: ticket (0 if it never queued); pool; what: overloaded/timeout/cancelled/unhealthy
  Leased,              // pool; slot; sessions: {slot's session}; rows: reused prefix tokens
  LeaseReleased,       // pool; slot; what: "healthy"/"unhealthy"
  DecodeGroup,         // pool; slots and sessions in rotation order; rows
  Cancelled,           // pool (0: a bare session); slot; sessions; what: where it was noticed
  Note,                // from Python: what = note kind; subject, pool, slot, detail
};

const char* schedule_event_kind_name(ScheduleEventKind kind);

struct ScheduleEvent {
  uint64_t seq = 0;
  int64_t time_ns = 0;  // since recording started (steady clock)
  ScheduleEventKind kind = ScheduleEventKind::Note;
  uint64_t subject = 0;
  uint64_t pool = 0;
  int64_t slot = -1;
  uint64_t rows = 0;
  std::vector<uint64_t> sessions;
  std::vector<int64_t> slots;
  std::string what;
  std::string detail;
};

class ScheduleRecorder {
 public:
  // A log longer than this stops growing and says how many events it dropped.
  static constexpr size_t kMaxEvents = 2'000'000;

  bool on() const { return on_.load(std::memory_order_relaxed); }

  // Clears the log and starts recording. Throws InvalidArgument if already on
  // (one recording per engine at a time).
  void start();
  // Stops recording; returns every event, oldest first.
  std::vector<ScheduleEvent> stop();
  // The events so far (a copy), recording or not.
  std::vector<ScheduleEvent> events() const;
  uint64_t dropped() const;

  // Stamps and appends `event` (seq and time_ns are assigned here). Does
  // nothing when off.
  void record(ScheduleEvent event);
  // A Cancelled event: a request's cancellation noticed at `where` (for a
  // bare session pool = 0 and slot = -1). Does nothing when off.
  void record_cancelled(uint64_t pool, int64_t slot, uint64_t session, const char* where);
  // A fresh id for a recorded permit (never 0).
  uint64_t next_permit_id() { return next_permit_id_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<bool> on_{false};
  std::atomic<uint64_t> next_permit_id_{1};
  mutable std::mutex mutex_;
  std::vector<ScheduleEvent> events_;
  std::chrono::steady_clock::time_point origin_{};
  uint64_t next_seq_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace muser
