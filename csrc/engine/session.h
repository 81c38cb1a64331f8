// One resident sequence: its KV state, token history, position and the
// retained next-token logits of its last position.
//
// Thread safety: every method locks the session, so concurrent calls on one
// session are serialized (not interleaved); different sessions of one engine
// run independently and share the accelerator through Engine::forward.
//
// Failure guarantee (every mutating call): if it throws -- a token id out of
// range (InvalidArgument), the context limit (ContextOverflow), or a failure
// inside the forward (InternalError, std::bad_alloc) -- tokens(), n_past()
// and logits() are exactly what they were. The KV state may have lost
// positions behind a failed write; the next call notices (KvState::intact)
// and rebuilds it from the token history, bitwise identical by the
// exactness contract.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/step_runner.h"
#include "core/cancel_token.h"
#include "engine/scheduling_policy.h"

namespace muser {

class Engine;

// A frozen copy of a session: KV, history and logits. Immutable; restore()
// copies from it, so one snapshot can be restored any number of times, into
// any session of the same engine with the same max_context.
struct SessionSnapshot {
  std::shared_ptr<Engine> engine;
  size_t max_context = 0;
  std::unique_ptr<KvState> kv;
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // empty when the session had no logits
  size_t bytes() const;
};

class Session {
 public:
  // Use Engine::new_session. Throws InvalidArgument for max_context outside
  // 1..n_ctx_train.
  Session(std::shared_ptr<Engine> engine, size_t max_context);

  // Appends tokens, running the forward in chunks: 512 rows while no decoder
  // uses the accelerator, 64 from the next chunk boundary once one waits or
  // is decoding (prefill_contended; each chunk holds its own prefill permit).
  // Logits become those of the last token. An empty list changes nothing.
  // With `cancel`, a cancellation seen at a chunk boundary throws Cancelled;
  // so does whatever the thread's interrupt check throws (core/interrupt.h).
  // State is unchanged then, as for any failure.
  void prefill(const std::vector<int32_t>& tokens, const CancelToken* cancel = nullptr);
  // Appends one token under a decode permit (the rotation decides when).
  void decode(int32_t token);
  // Throws what decode(token) would throw before computing anything
  // (InvalidArgument, ContextOverflow); changes nothing. Lets a batcher keep
  // a row that cannot run out of a group instead of failing the group.
  void check_decode(int32_t token) const;

  // Appends tokens[i] to sessions[i] for 1..4 distinct sessions of one
  // engine, in ONE forward (one weight pass) under one decode-group permit.
  // Everything is checked before anything changes: a wrong row count, a
  // repeated session, a session of another engine, a token out of range or
  // a session at its context limit throws and no session changes; a failed
  // forward also leaves every session as it was.
  static void decode_group(const std::vector<Session*>& sessions, const std::vector<int32_t>& tokens);
  // Keeps the first n tokens (n <= n_past); logits become those of position
  // n - 1 (recomputed: one row, or a rebuild from history when a sliding-window
  // ring no longer holds that far back), none when n == 0.
  void truncate(size_t n);

  std::shared_ptr<const SessionSnapshot> snapshot() const;
  // Throws InvalidArgument for a snapshot of another engine or max_context.
  void restore(const SessionSnapshot& snapshot);

  size_t n_past() const;
  size_t max_context() const { return max_context_; }
  std::vector<int32_t> tokens() const;
  bool has_logits() const;
  // Copies the n_vocab logits into out; false (nothing copied) when there are none.
  bool copy_logits(float* out) const;
  size_t kv_bytes() const;
  const std::shared_ptr<Engine>& engine() const { return engine_; }
  // This session's key in the engine's decode rotation.
  uint64_t id() const { return id_; }

 private:
  void check_tokens(const int32_t* tokens, size_t n, const char* what) const;
  // Runs tokens[0..n) at positions start.. into kv, chunk by chunk; the last
  // row's logits land in `logits`.
  void run_chunks(KvState& kv, const int32_t* tokens, size_t n, size_t start, float* logits,
                  const CancelToken* cancel = nullptr);
  // Rebuilds the KV state from the history when it cannot resume at n_past.
  void ensure_resumable();
  // Appends n tokens: a decode permit for a single decoded token, prefill
  // permits per chunk otherwise.
  void append(const int32_t* tokens, size_t n, bool is_decode, const CancelToken* cancel);
  // Installs a successful forward's results (cannot throw: capacity reserved).
  void commit(const int32_t* tokens, size_t n);

  std::shared_ptr<Engine> engine_;
  const uint64_t id_;
  const size_t max_context_;
  const uint32_t n_vocab_;
  mutable std::mutex mutex_;
  std::unique_ptr<KvState> kv_;
  std::vector<int32_t> history_;  // n_past == history_.size()
  HostFloats logits_;         // n_vocab floats, valid when has_logits_
  HostFloats staged_logits_;  // n_vocab floats: a forward's output until it commits
  bool has_logits_ = false;
};

static_assert(kPrefillChunkRows <= kMaxStepRows, "a prefill chunk must fit one forward segment");

}  // namespace muser
