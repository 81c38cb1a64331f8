// What a replay of a step graph gets besides the graph: the values that
// change every step. Rows are the step's rows in order (segments of one
// sequence each, laid end to end); slots are the sequences of the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv/kv_state.h"

namespace muser {

struct StepInputs {
  std::vector<int32_t> tokens;     // per row
  std::vector<int32_t> positions;  // per row
  std::vector<uint32_t> row_slot;  // per row: index into slots
  // Per slot: the sequence's KV, and whether this step writes it (false: a
  // replay of positions already intact, recomputed for logits only).
  std::vector<KvState*> slots;
  std::vector<bool> slot_writes;
  // Per output row: the step row it reads (Input role OutputRows) and where
  // its logits go (n_vocab floats, host memory).
  std::vector<int32_t> output_rows;
  std::vector<float*> outputs;
  // Per row, when the graph has hidden states (shape.hidden): where that
  // row's final hidden state goes (n_embd floats, host), or null.
  std::vector<float*> hidden;
};

}  // namespace muser
