#include "serve/admission_policy.h"

namespace muser {

size_t next_waiter(const std::vector<WaiterView>& waiters) {
  if (waiters.size() > kFcfsAboveWaiters) return 0;
  for (size_t i = 0; i < waiters.size(); ++i) {
    if (waiters[i].passed_over >= kMaxPassedOver) return i;
  }
  size_t best = 0;
  for (size_t i = 1; i < waiters.size(); ++i) {
    if (waiters[i].cached_prefix > waiters[best].cached_prefix) best = i;
  }
  return best;
}

}  // namespace muser
