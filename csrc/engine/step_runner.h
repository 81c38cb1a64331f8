// Turns a forward over segments into a step: validates the batch, finds (or
// records) the model's step graph for its shape class, fills the replay
// inputs (tokens, positions, KV slots, output rows), brackets the KV writes
// and has the backend execute the graph.
//
// Thread safety: forward runs one at a time (the engine serializes forwards
// through its AcceleratorScheduler); new_kv_state may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/limits.h"
#include "graph/graph.h"
#include "graph/step_inputs.h"
#include "kv/kv_state.h"
#include "model/model.h"

namespace muser {

// One session's rows in a forward.
struct ForwardSegment {
  KvState* kv = nullptr;            // the session's state; made by this engine's new_kv_state
  const int32_t* tokens = nullptr;  // n_tokens ids, each in [0, n_vocab)
  size_t n_tokens = 0;              // 1..kMaxStepRows
  size_t start = 0;                 // position of tokens[0]
  // Receives the next-token logits of the segment's last row (n_vocab
  // floats); null when the caller does not need them.
  float* logits = nullptr;
  // false: positions [start, start + n_tokens) are computed and written to kv;
  //   kv must satisfy intact(start, start).
  // true (replay): those positions are already intact in kv from an earlier
  //   forward of the same tokens; they are recomputed for their logits only
  //   and kv is not written at all (truncate uses this to recover the logits
  //   of an earlier position). kv must satisfy intact(start, start + n_tokens).
  bool replay = false;
  // Optional (embeddings): receives the final hidden state of EVERY row of
  // the segment after the output norm -- the vectors the output matrix
  // would multiply -- as n_tokens x n_embd floats, row-major. Same
  // exactness contract as the logits: a row's vector does not depend on the
  // other rows of the batch or on how its sequence was split into segments.
  float* hidden = nullptr;
};

class StepRunner {
 public:
  StepRunner(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend);

  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }

  // A fresh KV state for a session of up to max_context positions. Memory
  // is taken as the session grows, not up front.
  std::unique_ptr<KvState> new_kv_state(size_t max_context) const;

  // Runs one step over all rows of all segments (one weight pass). Segments
  // must belong to distinct KV states. Throws InvalidArgument for a
  // malformed batch (empty, too many rows, token out of range, past
  // max_context) and InternalError for a KV state that is not intact where
  // the segment needs it.
  //
  // Failure guarantee: if forward throws, every KV state still satisfies
  // intact(start, start) for its segment, so the session can retry from
  // where it was. (Ring slots overwritten on the way held positions at least
  // one window behind `start`: intact() reports them lost, and a session that
  // truncates back that far rebuilds from its token history.) Logits buffers
  // may have been partly written.
  void forward(const std::vector<ForwardSegment>& segments);

  // Shape classes whose graphs are kept (the least recently used is dropped).
  static constexpr size_t kGraphCacheSize = 32;

  // Step graphs recorded so far (tests: a shape class is recorded once and
  // replayed). Read it only between forwards.
  uint64_t graphs_built() const { return graphs_built_; }

 private:
  const StepGraph& graph_for(ShapeClass shape);

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  std::list<std::shared_ptr<const StepGraph>> graphs_;  // most recently used first
  StepInputs inputs_;
  uint64_t graphs_built_ = 0;
};

}  // namespace muser
