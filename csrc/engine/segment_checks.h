// Checks every backend applies to a forward batch before touching anything,
// so a malformed batch fails the same way (and changes nothing) everywhere.
#pragma once

#include <vector>

#include "engine/step_runner.h"

namespace muser {

// Throws InvalidArgument for an empty batch, a segment of 0 or more than
// kMaxStepRows rows, positions past the state's max_context, a token
// outside [0, n_vocab) or one KV state in two segments; InternalError for a
// state that is not intact where the segment needs it. `where` names the
// backend in messages.
void check_segments(const std::vector<ForwardSegment>& segments, uint32_t n_vocab, const char* where);

// Total rows of the batch.
size_t total_rows(const std::vector<ForwardSegment>& segments);

}  // namespace muser
