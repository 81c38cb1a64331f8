// The one owner of an accelerator. Every forward (each decode, each decode
// group, each prefill chunk) holds a Permit from here while it runs.
//
// Thread safety: all members are safe to call from any thread. acquire()
// blocks (callers in bindings release the GIL first).
//
// Poisoning: a permit holder that leaves the accelerator in an unknown state
// calls Permit::poison(). From then on every waiting and future acquire()
// throws Unhealthy instead of blocking: never a hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <vector>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "engine/schedule_recorder.h"
#include "engine/scheduling_policy.h"

namespace muser {

class AcceleratorScheduler;

// RAII: holding one means owning the accelerator; destroying (or moving
// from and destroying) it releases and wakes waiters. Move-only.
class Permit {
 public:
  Permit() = default;
  Permit(Permit&& other) noexcept;
  Permit& operator=(Permit&& other) noexcept;
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;
  ~Permit();

  bool held() const { return scheduler_ != nullptr; }
  WorkKind kind() const { return kind_; }
  // Marks the scheduler unhealthy (see above) and releases.
  void poison(const std::string& reason);
  void release();

 private:
  friend class AcceleratorScheduler;
  Permit(AcceleratorScheduler* scheduler, WorkKind kind) : scheduler_(scheduler), kind_(kind) {}
  AcceleratorScheduler* scheduler_ = nullptr;
  WorkKind kind_ = WorkKind::Decode;
  std::chrono::steady_clock::time_point granted_at_{};
  uint64_t record_id_ = 0;  // its id in the schedule recording; 0 when not recorded
};

struct SchedulerStats {
  uint64_t decode_grants = 0;
  uint64_t decode_rows = 0;
  uint64_t prefill_grants = 0;
  uint64_t prefill_rows = 0;                // rows over all prefill chunks
  uint64_t prefill_chunks_contended = 0;    // chunks cut to 64 rows because a decoder waited
  uint64_t permit_wait_ns = 0;  // summed over grants
  uint64_t permit_hold_ns = 0;  // summed over releases
  uint64_t max_permit_wait_ns = 0;
};

class AcceleratorScheduler {
 public:
  AcceleratorScheduler() = default;
  AcceleratorScheduler(const AcceleratorScheduler&) = delete;
  AcceleratorScheduler& operator=(const AcceleratorScheduler&) = delete;

  // Blocks until the rotation selects this decode (a group of 1).
  Permit acquire_decode(uint64_t sequence_id);
  // Blocks until the rotation selects one of `sequence_ids` (1..4 distinct ids).
  Permit acquire_decode_group(const std::set<uint64_t>& sequence_ids);
  // Blocks until nobody is active and no decode waits. `session_id` only
  // labels the permit in a schedule recording (0: none).
  Permit acquire_prefill(uint64_t session_id = 0);

  bool has_waiting_decode() const;
  // Decode permits granted so far, and how long ago the last one was
  // released (empty before the first). A prefill compares the count between
  // its own chunks and the age against kRecentDecodeWindow (prefill_contended).
  struct DecodeActivity {
    uint64_t decode_grants = 0;
    std::optional<std::chrono::nanoseconds> since_last_decode;
    size_t active_decoders = 0;
  };
  DecodeActivity decode_activity() const;
  // A generation entering / leaving its decode loop (SlotPool: a lease's
  // first decode / its release): while any is active, prefill chunks are short.
  void decoder_started();
  void decoder_finished();
  // Telemetry from whoever holds a prefill permit: the chunk it is running.
  void record_prefill_chunk(size_t rows, bool contended);
  bool poisoned() const;
  std::string poison_reason() const;
  SchedulerStats stats() const;
  SchedulerState snapshot_state() const;
  // The schedule recording of this scheduler's permits (and, through the
  // engine, of its pools).
  ScheduleRecorder& recorder() { return recorder_; }

 private:
  friend class Permit;
  void release(Permit& permit);
  void poison(Permit& permit, const std::string& reason);
  void throw_if_poisoned_locked() const;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  SchedulerState state_;
  bool poisoned_ = false;
  std::string poison_reason_;
  SchedulerStats stats_;
  std::optional<std::chrono::steady_clock::time_point> last_decode_released_;
  size_t active_decoders_ = 0;
  ScheduleRecorder recorder_;
  uint64_t active_record_id_ = 0;  // the recorded id of the permit now held, if any
};

}  // namespace muser
