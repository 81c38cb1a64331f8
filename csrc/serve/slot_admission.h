// Admission to a pool of 1..4 resident slots (DESIGN.md "Serving level").
//
// - acquire() takes a free slot or waits, first come first served; with
//   `max_waiting` callers already queued it throws Overloaded at once.
// - Among free slots it prefers the one whose history shares the longest
//   prefix with the new prompt (asked through `affinity`), so its KV is
//   reused instead of recomputed; on a tie, the one with the least history,
//   so a slot worth reusing later is not overwritten needlessly.
// - mark_unhealthy() latches the pool: every waiting and later acquire()
//   throws Unhealthy. There is no way back; make a new pool.
//
// Thread safety: all members may be called from any thread; acquire()
// blocks (bindings release the GIL first).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/cancel_token.h"
#include "core/limits.h"
#include "engine/schedule_recorder.h"

namespace muser {

// How well a free slot suits a new prompt.
struct SlotAffinity {
  size_t shared_prefix = 0;  // tokens of its history the prompt starts with
  size_t history = 0;        // tokens of history it holds (lost if overwritten)
};

struct AdmissionStats {
  uint64_t admissions = 0;
  uint64_t rejections = 0;   // Overloaded
  uint64_t timeouts = 0;
  uint64_t cancellations = 0;
  uint64_t admission_wait_ns = 0;
  size_t waiting = 0;
  size_t in_use = 0;
};

class SlotAdmission {
 public:
  // n_slots in 1..4; max_waiting >= 0. InvalidArgument otherwise.
  SlotAdmission(size_t n_slots, size_t max_waiting);

  // Returns the slot index now owned by the caller. `affinity(slot)` is
  // called under the admission lock for free slots only (may be empty).
  // Throws Overloaded, Timeout, Cancelled or Unhealthy.
  size_t acquire(std::optional<std::chrono::nanoseconds> timeout, const CancelTokenPtr& cancel,
                 const std::function<SlotAffinity(size_t)>& affinity);
  void release(size_t slot);
  void mark_unhealthy(const std::string& reason);

  // Admission events go to `recorder` (when it is on), labelled `pool_id`.
  // Call once, before the admission is shared between threads.
  void attach_recorder(ScheduleRecorder* recorder, uint64_t pool_id) {
    recorder_ = recorder;
    pool_id_ = pool_id;
  }

  bool healthy() const;
  std::string unhealthy_reason() const;
  size_t n_slots() const { return in_use_.size(); }
  size_t max_waiting() const { return max_waiting_; }
  AdmissionStats stats() const;

 private:
  void throw_if_unhealthy_locked() const;
  std::optional<size_t> best_free_slot_locked(const std::function<SlotAffinity(size_t)>& affinity) const;
  // Under mutex_, so a pool's admission events are recorded in their true order.
  void record_locked(ScheduleEventKind kind, uint64_t ticket, int64_t slot, const char* what) const;

  const size_t max_waiting_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> in_use_;
  std::set<uint64_t> waiting_tickets_;
  uint64_t next_ticket_ = 0;
  bool unhealthy_ = false;
  std::string unhealthy_reason_;
  AdmissionStats stats_;
  ScheduleRecorder* recorder_ = nullptr;
  uint64_t pool_id_ = 0;
};

}  // namespace muser
