// Which waiter is admitted next when a slot frees up: a pure function of
// plain state, so the rule is property-tested without threads
// (tests/property/test_admission_order.py).
//
// Rule (DESIGN.md "Serving level"):
// - with more than kFcfsAboveWaiters waiters: the oldest (first come, first
//   served; scoring a long queue would cost more than it saves);
// - else, the oldest waiter that has been passed over kMaxPassedOver times;
// - else, the waiter whose prompt shares the longest prefix with the history
//   of a free slot (its KV is reused instead of recomputed); ties go to the
//   oldest.
// "Passed over" = a waiter that arrived later was admitted first. Starved
// waiters go in arrival order, and a younger waiter is never preferred to
// them, so no waiter is passed over more than kMaxPassedOver times.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace muser {

constexpr size_t kFcfsAboveWaiters = 128;
constexpr uint32_t kMaxPassedOver = 4;

struct WaiterView {
  size_t cached_prefix = 0;   // longest prefix shared with a free slot's history
  uint32_t passed_over = 0;
};

// `waiters` in arrival order (oldest first), not empty. Returns the index of
// the one to admit.
size_t next_waiter(const std::vector<WaiterView>& waiters);

}  // namespace muser
