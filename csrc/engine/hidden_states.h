// Final hidden states of whole texts (for embeddings): prefills of throwaway
// KV states, under the scheduler like any prefill.
//
// Kept apart from Session on purpose: it needs no history, logits or
// rollback, only ForwardSegment::hidden. (Porting note for the graph
// refactor: this file depends on Engine::forward, Engine::new_kv_state,
// the scheduler's prefill permits and ForwardSegment::hidden only.)
#pragma once

#include <cstdint>
#include <vector>

#include "core/cancel_token.h"

namespace muser {

class Engine;

// For each text (token ids, 1..n_ctx_train of them), its final hidden states
// after the output norm: n_tokens x n_embd floats, row-major.
//
// Texts are packed into forwards of up to the prefill chunk size (512 rows,
// 64 once a decoder waits, as for Session::prefill): several short texts
// share one weight pass, each as its own segment with its own KV state; a
// long text continues in the next forward. Each forward holds one prefill
// permit. By the exactness contract every text's vectors are bitwise the
// same however it was packed.
//
// Throws InvalidArgument for an empty text, a text longer than the model's
// context or a token out of range (before anything runs); Cancelled when
// `cancel` is seen at a forward boundary. Nothing is kept after a failure.
std::vector<std::vector<float>> compute_hidden_states(Engine& engine, const std::vector<std::vector<int32_t>>& texts,
                                                      const CancelToken* cancel = nullptr);

}  // namespace muser
