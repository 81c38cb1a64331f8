// The numbers that shape scheduling and batching, in one place. Exported to
// Python by the bindings (muser._core), which uses them for its defaults.
#pragma once

#include <cstddef>

namespace muser {

// Rows one forward step may hold: the longest prefill segment. KV ring planes
// of sliding-window layers are sized window + kMaxStepRows - 1.
constexpr size_t kMaxStepRows = 512;
// Prefill chunk rows while no decoder waits, and once one does.
constexpr size_t kPrefillChunkRows = 512;
constexpr size_t kPrefillChunkRowsContended = 64;
// Decode rows of distinct sequences batched into one step (one weight pass).
constexpr size_t kMaxDecodeGroupRows = 4;
// Slots of a SlotPool (each decodes one row of a group).
constexpr size_t kMaxSlots = kMaxDecodeGroupRows;
// Default bound on requests waiting for a SlotPool slot.
constexpr size_t kDefaultMaxWaiting = 64;
// Default context of a session: min(this, the model's training context).
constexpr size_t kDefaultMaxContext = 4096;
// Default time a SlotPool decode step waits for other slots' steps, in µs.
constexpr double kDefaultBatchWindowUs = 250.0;

static_assert(kPrefillChunkRows <= kMaxStepRows, "a prefill chunk must fit one step");
static_assert(kPrefillChunkRowsContended <= kPrefillChunkRows, "contended chunks are the shorter ones");

}  // namespace muser
