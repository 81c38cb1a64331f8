// One token for each of 1..kMaxDecodeGroup sessions of one engine, computed
// in a single forward: one pass over the weights for all of them. Each row's
// logits are bitwise those of decoding it alone (batch invariance).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace muser {

class Engine;
class Session;

constexpr size_t kMaxDecodeGroup = 4;

// Throws InvalidArgument for a group size outside 1..kMaxDecodeGroup, a
// session given twice or belonging to another engine, a token count that
// differs from the session count or a token out of range; ContextOverflow
// when a session is full. Failure guarantee: if it throws, no session
// changes (tokens, n_past, logits).
void decode_group(Engine& engine, const std::vector<Session*>& sessions, const std::vector<int32_t>& tokens);

}  // namespace muser
