// Admission to a pool of 1..4 resident slots (DESIGN.md "Serving level").
//
// - acquire() takes a free slot or waits; with `max_waiting` callers already
//   queued it throws Overloaded at once. When a slot frees up, the waiter
//   admitted next is chosen by next_waiter (admission_policy.h): longest
//   cached prefix first, with aging (nobody is passed over more than
//   kMaxPassedOver times), first come first served beyond 128 waiters.
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
#include <map>
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
  size_t waiting() const;
  std::string unhealthy_reason() const;
  size_t n_slots() const { return in_use_.size(); }
  size_t max_waiting() const { return max_waiting_; }
  AdmissionStats stats() const;

 private:
  void throw_if_unhealthy_locked() const;
  std::optional<size_t> best_free_slot_locked(const std::function<SlotAffinity(size_t)>& affinity) const;
  // The ticket next_waiter picks now (waiters_ not empty); rescoring waiters
  // only when the free slots changed since they were last scored.
  uint64_t chosen_ticket_locked();

  struct Waiter {
    const std::function<SlotAffinity(size_t)>* affinity = nullptr;  // the waiting caller's
    uint32_t passed_over = 0;
    size_t cached_prefix = 0;
    uint64_t scored_at = UINT64_MAX;  // free_version_ when cached_prefix was computed
  };
  // Under mutex_, so a pool's admission events are recorded in their true order.
  void record_locked(ScheduleEventKind kind, uint64_t ticket, int64_t slot, const char* what) const;

  const size_t max_waiting_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> in_use_;
  std::map<uint64_t, Waiter> waiters_;  // by ticket = arrival order
  uint64_t next_ticket_ = 0;
  uint64_t free_version_ = 0;  // bumped whenever a slot is taken or released
  bool unhealthy_ = false;
  std::string unhealthy_reason_;
  AdmissionStats stats_;
  ScheduleRecorder* recorder_ = nullptr;
  uint64_t pool_id_ = 0;
};

}  // namespace muser
