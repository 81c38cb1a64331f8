#include "engine/scheduling_policy.h"

#include <algorithm>

namespace muser {

std::optional<uint64_t> next_decode(const SchedulerState& state) {
  if (state.waiting_decode.empty()) return std::nullopt;
  if (state.last_decode) {
    auto after = state.waiting_decode.upper_bound(*state.last_decode);
    if (after != state.waiting_decode.end()) return *after;
  }
  return *state.waiting_decode.begin();
}

bool decode_eligible(const SchedulerState& state, const std::set<uint64_t>& sequence_ids) {
  if (state.active) return false;
  std::optional<uint64_t> selected = next_decode(state);
  return selected && sequence_ids.count(*selected) != 0;
}

bool prefill_eligible(const SchedulerState& state) {
  return !state.active && state.waiting_decode.empty();
}

bool prefill_contended(bool decode_waiting, bool decoded_since_previous_chunk,
                       std::optional<std::chrono::nanoseconds> since_last_decode) {
  return decode_waiting || decoded_since_previous_chunk ||
         (since_last_decode && *since_last_decode < kRecentDecodeWindow);
}

size_t prefill_chunk_rows(bool decode_waiting, size_t remaining_rows) {
  return std::min(remaining_rows, decode_waiting ? kPrefillChunkRowsContended : kPrefillChunkRows);
}

uint64_t rotation_cursor_after(const SchedulerState& state, const std::set<uint64_t>& group) {
  // Walk the group in rotation order from the selected member; the last one
  // visited becomes the cursor, so the next turn goes to whoever follows it.
  std::optional<uint64_t> selected = next_decode(state);
  uint64_t start = selected ? *selected : *group.begin();
  auto at_or_after = group.lower_bound(start);
  if (at_or_after == group.begin()) return *group.rbegin();
  return *std::prev(at_or_after);
}

}  // namespace muser
