// Who may use the accelerator next: pure functions of plain state, so the
// rules can be tested (and property-tested from Python) without threads.
//
// Rules (DESIGN.md "Engine level"):
// - decode: eligible when nobody is active and the cyclic rotation selects
//   it: the next waiting id after `last_decode`, wrapping to the smallest.
// - prefill: eligible when nobody is active and no decode waits anywhere.
// - prefill chunks are 512 rows while no decoder waits and shrink to 64 rows
//   at the next boundary once one does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>

#include "core/limits.h"

namespace muser {

enum class WorkKind { Decode, Prefill };


struct SchedulerState {
  bool active = false;
  std::set<uint64_t> waiting_decode;     // sequence ids, ordered
  std::optional<uint64_t> last_decode;   // the rotation's cursor
  size_t waiting_prefill = 0;
};

// The decode sequence the rotation selects now, if any decode waits.
std::optional<uint64_t> next_decode(const SchedulerState& state);

// May a decode (group) made of `sequence_ids` start now? A group is eligible
// when the rotation selects one of its members.
bool decode_eligible(const SchedulerState& state, const std::set<uint64_t>& sequence_ids);

bool prefill_eligible(const SchedulerState& state);

// Rows for the next prefill chunk, given how many remain.
size_t prefill_chunk_rows(bool decode_waiting, size_t remaining_rows);

// After a decode group runs, the rotation cursor moves along the rotation
// from the selected member over the group's members, stopping before the
// first waiting sequence that is not in the group: a waiter that the group's
// later members passed is next, so nobody is passed over twice. (Moving the
// cursor to the group's last member instead let a group {1, 4} pass a
// waiting 3 on every turn: a starved decoder, found by muser.testing.)
// `state` is the state at the grant: the group's ids are still waiting.
uint64_t rotation_cursor_after(const SchedulerState& state, const std::set<uint64_t>& group);

}  // namespace muser
