#include "core/interrupt.h"

namespace muser {
namespace {

thread_local const std::function<void()>* current_check = nullptr;

}  // namespace

InterruptScope::InterruptScope(std::function<void()> check) : check_(std::move(check)), previous_(current_check) {
  current_check = &check_;
}

InterruptScope::~InterruptScope() { current_check = previous_; }

void check_interrupt() {
  if (current_check != nullptr) (*current_check)();
}

bool interrupt_check_installed() { return current_check != nullptr; }

}  // namespace muser
