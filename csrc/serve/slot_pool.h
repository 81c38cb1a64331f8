// SlotPool: 1..4 resident sessions of one engine handed out to requests
// (DESIGN.md "Serving level").
//
// - acquire(prompt) admits the caller (SlotAdmission: FIFO, bounded queue,
//   timeout, cancel, unhealthy latch), picks the free slot whose history
//   shares the longest prefix with the prompt and rewinds it to that prefix,
//   so only the rest needs prefilling.
// - decode(slot, token) goes through the DecodeBatcher, which packs the rows
//   of concurrent requests into decode groups (disabled with one slot: the
//   rendezvous window would only add latency).
// - context_shift(slot, n_keep) rebuilds a shortened context in the one
//   staging session and swaps it in only when complete; staging is never a
//   serving slot.
// - release(slot, healthy=false) latches the pool unhealthy.
//
// Thread safety: any thread may call any member; a slot is used only by the
// caller that acquired it. Blocking calls are released-GIL in the bindings.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/cancel_token.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "serve/decode_batcher.h"
#include "serve/slot_admission.h"

namespace muser {

struct SlotLease {
  size_t slot = 0;
  size_t reused_tokens = 0;  // prompt tokens already in the slot's KV
};

struct PoolStats {
  AdmissionStats admission;
  BatcherStats batcher;
  uint64_t reused_prefix_tokens = 0;
  uint64_t context_shifts = 0;
};

class SlotPool {
 public:
  SlotPool(std::shared_ptr<Engine> engine, size_t n_slots, size_t max_waiting, size_t max_context,
           std::chrono::microseconds batch_window);

  // Throws Overloaded, Timeout, Cancelled, Unhealthy.
  SlotLease acquire(const std::vector<int32_t>& prompt, std::optional<std::chrono::nanoseconds> timeout,
                    const CancelTokenPtr& cancel);
  void release(size_t slot, bool healthy);

  // The session currently serving `slot` (context_shift may replace it).
  std::shared_ptr<Session> session(size_t slot) const;

  // One decode step of `slot`, coalesced with other slots' steps.
  void decode(size_t slot, int32_t token, const CancelTokenPtr& cancel);
  // A request entering / leaving its decode loop (lets the batcher know how
  // many rows could still join a group).
  void begin_decoding();
  void end_decoding();

  // Keeps the first n_keep tokens and the most recent half of the rest,
  // rebuilt in the staging session, then swapped in. Returns the new n_past.
  // On failure the slot's session is untouched.
  size_t context_shift(size_t slot, size_t n_keep, const CancelToken* cancel);

  void mark_unhealthy(const std::string& reason) { admission_.mark_unhealthy(reason); }
  bool healthy() const { return admission_.healthy(); }
  size_t n_slots() const { return sessions_.size(); }
  size_t max_context() const { return max_context_; }
  const std::shared_ptr<Engine>& engine() const { return engine_; }
  // Process-unique, from 1: labels this pool's events in schedule recordings.
  uint64_t id() const { return id_; }
  PoolStats stats() const;

 private:
  void check_slot(size_t slot) const;
  void run_group(const std::vector<DecodeJob*>& group);
  ScheduleRecorder& recorder() const { return engine_->scheduler().recorder(); }

  std::shared_ptr<Engine> engine_;
  const uint64_t id_;
  const size_t max_context_;
  mutable std::mutex sessions_mutex_;  // guards the session pointers (swapped by context_shift)
  std::vector<std::shared_ptr<Session>> sessions_;
  std::mutex staging_mutex_;           // one context shift at a time
  std::shared_ptr<Session> staging_;
  SlotAdmission admission_;
  std::unique_ptr<DecodeBatcher> batcher_;  // null with one slot
  std::atomic<uint64_t> reused_prefix_tokens_{0};
  std::atomic<uint64_t> context_shifts_{0};
};

}  // namespace muser
