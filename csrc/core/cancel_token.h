// A cancellation flag shared between a request's owner and whatever it waits
// on. Cancelling is sticky and thread-safe; waiters poll it at their wake-ups
// (blocking waits in muser wake at least every kCancelPollInterval when
// given a token), so a cancelled request never sleeps on.
//
// A token may have a parent (a caller's token shared by several requests)
// and a deadline: it reads as cancelled once it, or its parent, is cancelled,
// or once its deadline has passed. deadline_passed() tells the two apart, so
// a request past its deadline can end with a deadline error, not "cancelled".
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

namespace muser {

constexpr std::chrono::milliseconds kCancelPollInterval{5};

class CancelToken {
 public:
  CancelToken() = default;
  explicit CancelToken(std::shared_ptr<const CancelToken> parent) : parent_(std::move(parent)) {}

  void cancel() { cancelled_.store(true, std::memory_order_release); }
  bool cancelled() const {
    return cancelled_.load(std::memory_order_acquire) || deadline_passed() || (parent_ && parent_->cancelled());
  }

  // Sets (or moves) the deadline; any thread, at any time.
  void set_deadline(std::chrono::steady_clock::time_point deadline) {
    deadline_ns_.store(deadline.time_since_epoch().count(), std::memory_order_release);
  }
  bool has_deadline() const { return deadline_ns_.load(std::memory_order_acquire) != kNoDeadline; }
  bool deadline_passed() const {
    const int64_t deadline = deadline_ns_.load(std::memory_order_acquire);
    return deadline != kNoDeadline && std::chrono::steady_clock::now().time_since_epoch().count() >= deadline;
  }

 private:
  static constexpr int64_t kNoDeadline = INT64_MAX;
  std::atomic<bool> cancelled_{false};
  std::atomic<int64_t> deadline_ns_{kNoDeadline};  // steady_clock ticks since its epoch
  const std::shared_ptr<const CancelToken> parent_;
};

using CancelTokenPtr = std::shared_ptr<CancelToken>;

}  // namespace muser
