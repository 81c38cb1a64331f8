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

bool prefill_contended(bool decode_waiting, bool decoders_active, bool decoded_since_previous_chunk,
                       std::optional<std::chrono::nanoseconds> since_last_decode) {
  return decode_waiting || decoders_active || decoded_since_previous_chunk ||
         (since_last_decode && *since_last_decode < kRecentDecodeWindow);
}

size_t prefill_chunk_rows(bool decode_waiting, size_t remaining_rows) {
  return std::min(remaining_rows, decode_waiting ? kPrefillChunkRowsContended : kPrefillChunkRows);
}

uint64_t rotation_cursor_after(const SchedulerState& state, const std::set<uint64_t>& group) {
  std::optional<uint64_t> selected = next_decode(state);
  const uint64_t start = selected && group.count(*selected) != 0 ? *selected : *group.begin();
  std::set<uint64_t> waiting(state.waiting_decode);
  waiting.insert(group.begin(), group.end());
  // Everyone waiting in rotation order from `start`: [start, end) then [begin, start).
  uint64_t cursor = start;
  auto visit = [&](std::set<uint64_t>::const_iterator from, std::set<uint64_t>::const_iterator to) {
    for (auto it = from; it != to; ++it) {
      if (group.count(*it) == 0) return false;
      cursor = *it;
    }
    return true;
  };
  if (visit(waiting.find(start), waiting.end())) visit(waiting.begin(), waiting.find(start));
  return cursor;
}

}  // namespace muser
