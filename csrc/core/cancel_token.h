// A cancellation flag shared between a request's owner and whatever it waits
// on. Cancelling is sticky and thread-safe; waiters poll it at their wake-ups
// (blocking waits in muser wake at least every kCancelPollInterval when
// given a token), so a cancelled request never sleeps on.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>

namespace muser {

constexpr std::chrono::milliseconds kCancelPollInterval{5};

class CancelToken {
 public:
  void cancel() { cancelled_.store(true, std::memory_order_release); }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> cancelled_{false};
};

using CancelTokenPtr = std::shared_ptr<CancelToken>;

}  // namespace muser
