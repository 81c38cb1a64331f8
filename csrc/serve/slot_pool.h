// SlotPool: 1..4 resident sessions of one engine handed out to requests
// (DESIGN.md "Serving level").
//
// - acquire(prompt) admits the caller (SlotAdmission: bounded queue, cached
//   prefix order with aging, timeout, cancel, unhealthy latch), picks the
//   free slot whose history shares the longest prefix with the prompt and
//   rewinds it to that prefix, so only the rest needs prefilling.
// - decode(slot, token) goes through the DecodeBatcher, which packs the rows
//   of concurrent requests into decode groups (disabled with one slot: the
//   rendezvous window would only add latency). Every leased slot counts as
//   a participant (a row that may join the group) until released, so
//   callers driving slots directly are packed like generate/stream. A row that cannot run
//   (token out of range, context full) fails alone, never its group.
// - context_shift(slot, n_keep) rebuilds a shortened context in the one
//   staging session and swaps it in only when complete; staging is never a
//   serving slot.
// - The unhealthy latch (release(slot, healthy=false), an InternalError while
//   rewinding in acquire, mark_unhealthy) stops everything: later acquires
//   and every prefill/decode/context shift of leases already held throw
//   Unhealthy with the reason.
//
// Thread safety: any thread may call any member; a slot is used only by the
// caller that acquired it. Blocking calls are released-GIL in the bindings.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
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
  uint64_t prefix_hits = 0;    // admissions that reused at least one token
  uint64_t prefix_misses = 0;  // admissions that reused none
  uint64_t context_shifts = 0;
  uint64_t kv_bytes = 0;       // KV memory the slots held after their last operation
};

class SlotPool {
 public:
  SlotPool(std::shared_ptr<Engine> engine, size_t n_slots, size_t max_waiting, size_t max_context,
           std::chrono::microseconds batch_window);
  ~SlotPool();
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  // Throws Overloaded, Timeout, Cancelled, Unhealthy; InternalError (after
  // latching the pool) when rewinding the chosen slot fails.
  SlotLease acquire(const std::vector<int32_t>& prompt, std::optional<std::chrono::nanoseconds> timeout,
                    const CancelTokenPtr& cancel);
  void release(size_t slot, bool healthy);

  // The session currently serving `slot` (context_shift may replace it).
  std::shared_ptr<Session> session(size_t slot) const;

  // Appends tokens to the slot's session (Session::prefill). Throws Unhealthy
  // once the pool latched.
  void prefill(size_t slot, const std::vector<int32_t>& tokens, const CancelToken* cancel);
  // One decode step of `slot`, coalesced with other slots' steps.
  void decode(size_t slot, int32_t token, const CancelTokenPtr& cancel);

  // Keeps the first n_keep tokens and the most recent half of the rest,
  // rebuilt in the staging session, then swapped in. Returns the new n_past.
  // On failure the slot's session is untouched.
  size_t context_shift(size_t slot, size_t n_keep, const CancelToken* cancel);

  void mark_unhealthy(const std::string& reason) { admission_.mark_unhealthy(reason); }
  bool healthy() const { return admission_.healthy(); }
  std::string unhealthy_reason() const { return admission_.unhealthy_reason(); }
  size_t waiting() const { return admission_.waiting(); }
  size_t n_slots() const { return sessions_.size(); }
  size_t max_context() const { return max_context_; }
  const std::shared_ptr<Engine>& engine() const { return engine_; }
  // Process-unique, from 1: labels this pool's events in schedule recordings.
  uint64_t id() const { return id_; }
  PoolStats stats() const;
  // Tests only: the batcher's next bookkeeping step fails (DecodeBatcher).
  void arm_batcher_fault();

 private:
  void check_slot(size_t slot) const;
  void throw_if_unhealthy() const;
  void run_group(const std::vector<DecodeJob*>& group);
  void note_kv_bytes(size_t slot);
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
  std::array<std::atomic<uint64_t>, kMaxSlots> kv_bytes_{};
  // Per slot: its lease has decoded, so it counts as an active decoder in the
  // engine's scheduler (short prefill chunks) until released.
  std::array<std::atomic<bool>, kMaxSlots> decoding_{};
  std::atomic<uint64_t> reused_prefix_tokens_{0};
  std::atomic<uint64_t> prefix_hits_{0};
  std::atomic<uint64_t> prefix_misses_{0};
  std::atomic<uint64_t> context_shifts_{0};
};

}  // namespace muser
