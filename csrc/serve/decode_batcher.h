// DecodeBatcher: coalesces decode steps of concurrent requests into groups of
// up to four rows, one weight pass each (DESIGN.md "Serving level").
//
// Each request thread submits its job and waits. The first thread that finds
// no runner becomes the runner: it waits while fewer rows are queued than
// could arrive, for up to `window` plus the time streams were recently seen
// to spend between their steps (their "think time": sampling, detokenizing,
// and in Python waiting for the GIL one after another), capped at
// kMaxThinkAllowance. Without that allowance streams that finished the same
// group come back staggered and the window closes on a group of one. Then it sorts the queue by the cyclic slot rotation,
// takes up to `max_rows`, leaves the rest queued, runs one group, installs
// each row's outcome in its job and wakes the owners. Then the next waiting
// thread becomes runner for whatever is still queued.
//
// Failure semantics: an exception from running a group reaches every owner
// of that group (and no one else); run_group may instead fail single rows by
// setting their job's `error` (a row that cannot run must not fail the rows
// packed with it). A job cancelled while still queued is withdrawn and its
// owner gets Cancelled; once taken into a group it runs to completion (the
// group is one indivisible weight pass). A failure in the runner's own
// bookkeeping fails every queued and running job with InternalError and
// frees the runner role: nobody hangs.
//
// Thread safety: all members may be called from any thread; submit() blocks
// (bindings release the GIL first).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/cancel_token.h"

namespace muser {

struct DecodeJob {
  uint64_t slot_id = 0;      // rotation key (stable per slot)
  int32_t token = 0;
  void* payload = nullptr;   // what the group runner needs (e.g. the session)
  CancelTokenPtr cancel;     // optional
  // Filled by the batcher:
  std::chrono::steady_clock::time_point submitted_at{};
  bool taken = false;
  bool done = false;
  std::exception_ptr error;
};

// The most a runner waits beyond `window` for streams that are thinking.
constexpr std::chrono::microseconds kMaxThinkAllowance{2000};

struct BatcherStats {
  uint64_t groups = 0;
  uint64_t rows = 0;
  std::vector<uint64_t> group_size_counts;  // index = rows in the group (0 unused)
  uint64_t queue_wait_ns = 0;               // submit -> taken into a group, summed
  uint64_t max_queue_wait_ns = 0;
  uint64_t cancelled_in_queue = 0;
  uint64_t failed_groups = 0;
  uint64_t think_time_ns = 0;  // smoothed time between a stream's steps
};

class DecodeBatcher {
 public:
  using RunGroup = std::function<void(const std::vector<DecodeJob*>& group)>;

  // window: rendezvous wait; 0 disables coalescing delay (single-slot pools).
  DecodeBatcher(RunGroup run_group, std::chrono::microseconds window, size_t max_rows);

  // Blocks until `job` ran (or failed, or was cancelled while queued).
  // Rethrows the group's error; throws Cancelled when withdrawn.
  void submit(DecodeJob& job);

  // Streams that are currently decoding. The runner stops waiting as soon as
  // this many rows are queued: nobody else could join the group.
  void add_participant();
  void remove_participant();

  // Wakes waiters so cancelled queued jobs are withdrawn promptly.
  void notify_cancelled();

  BatcherStats stats() const;
  // Tests only: the runner's next bookkeeping step throws (see above).
  void arm_bookkeeping_fault();
  std::chrono::microseconds window() const { return window_; }
  size_t max_rows() const { return max_rows_; }

 private:
  std::vector<DecodeJob*> take_group_locked();
  bool withdraw_if_cancelled_locked(DecodeJob& job);
  // Runs as the runner (lock held on entry and exit).
  void run_as_runner_locked(std::unique_lock<std::mutex>& lock);
  // Ends every queued job and every job of `group` with `error`.
  void fail_everyone_locked(const std::vector<DecodeJob*>& group, const std::exception_ptr& error);

  const RunGroup run_group_;
  const std::chrono::microseconds window_;
  const size_t max_rows_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<DecodeJob*> queue_;
  bool runner_active_ = false;
  size_t participants_ = 0;
  std::optional<uint64_t> last_slot_;
  // When each slot's last job finished, and the smoothed gap to its next submit.
  std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> finished_at_;
  double think_ns_ = 0.0;
  bool bookkeeping_fault_armed_ = false;
  BatcherStats stats_;
};

}  // namespace muser
