// Who may use the accelerator next: pure functions of plain state, so the
// rules can be tested (and property-tested from Python) without threads.
//
// Rules (DESIGN.md "Engine level"):
// - decode: eligible when nobody is active and the cyclic rotation selects
//   it: the next waiting id after `last_decode`, wrapping to the smallest.
// - prefill: eligible when nobody is active and no decode waits anywhere.
// - prefill chunks are 512 rows while no decoder waits or decodes and shrink
//   to 64 rows at the next boundary once one does (prefill_contended).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>

#include "core/limits.h"

namespace muser {

enum class WorkKind { Decode, Prefill };

// A decoder that finished a step this recently is between steps (sampling,
// detokenizing), not gone: it will want the accelerator within a step.
constexpr std::chrono::milliseconds kRecentDecodeWindow{50};

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

// Whether the next prefill chunk must be short because a decoder is waiting
// or decoding now: one waits; a generation is mid-way through its decode
// loop (`decoders_active`: a pool's lease that has decoded and not ended);
// one was served since this prefill's previous chunk; or one finished a step
// less than kRecentDecodeWindow ago (sessions used outside a pool;
// `since_last_decode` is empty when no decode ever ran). A decode long ago
// does not count: an idle engine prefills in full-size chunks.
bool prefill_contended(bool decode_waiting, bool decoders_active, bool decoded_since_previous_chunk,
                       std::optional<std::chrono::nanoseconds> since_last_decode);

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
