// Lets long core calls notice the host's signals (Ctrl-C) between chunks.
//
// The core knows nothing of Python. A binding that runs a long call on the
// interpreter's main thread installs an InterruptScope whose check re-takes
// the GIL briefly and asks Python whether a signal arrived; the core calls
// check_interrupt() at points where stopping keeps its failure guarantee
// (before a prefill chunk, between the layers of a CPU forward, at an
// admission wake-up). The check throws to stop; the exception travels like
// any other failure, so the session is left as it was before the call.
//
// The hook is per thread (thread_local): a scope affects only the calls made
// by the thread that installed it, and threads without one pay nothing.
#pragma once

#include <chrono>
#include <functional>

namespace muser {

// How often a blocking wait wakes to check for signals when a scope is installed.
constexpr std::chrono::milliseconds kInterruptPollInterval{50};

class InterruptScope {
 public:
  explicit InterruptScope(std::function<void()> check);
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  std::function<void()> check_;
  const std::function<void()>* previous_;
};

// Runs this thread's installed check (which may throw); nothing without one.
void check_interrupt();
bool interrupt_check_installed();

}  // namespace muser
