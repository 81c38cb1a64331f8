// The interface every backend (CPU, null, CUDA, Metal) implements: it runs
// the ops of step graphs (graph/ops.h) and owns where weights and KV rows
// live. It knows nothing of architectures: nothing under backend/ includes
// a header from model/, and no backend branches on what model it runs.
//
// Life of a backend inside an engine:
//   1. load_weights(table) once: the backend places every weight (the CPU
//      reads the mapping in place; a GPU backend uploads).
//   2. new_kv_storage(layout) per sequence: the rows of its KV (kv/kv_state.h
//      keeps the bookkeeping; the storage only holds bytes).
//   3. execute(graph, inputs) per step, one at a time (the engine serializes
//      steps): graphs come from a per-shape-class cache, so the same graph
//      object (same id) is replayed with new inputs many times.
//
// Exactness contract (DESIGN.md): the logits and the KV a row produces
// depend only on that row's token, its position and its sequence's earlier
// KV, never on the other rows of the step or on how a prefill was split.
// The CPU backend defines the reference arithmetic (notes/opset.md); other
// backends keep batch invariance and stay within tolerance of it.
#pragma once

#include <memory>

#include "graph/graph.h"
#include "graph/step_inputs.h"
#include "graph/weights.h"
#include "kv/kv_state.h"

namespace muser {

// n floats of host memory and how to free them (new_output_buffer).
using HostFloats = std::unique_ptr<float[], void (*)(float*)>;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const = 0;

  // Once, before anything else. The table (and the host bytes it points to)
  // outlives the backend. Throws ModelFormatError for a weight type the
  // backend cannot run.
  virtual void load_weights(const WeightTable& weights) = 0;

  // Storage for one sequence's KV; grown by KvState as the sequence grows.
  // May be called from any thread.
  virtual std::unique_ptr<KvStorage> new_kv_storage(const KvLayout& layout) const = 0;

  // Runs every op of `graph` with the replay values in `inputs`, then copies
  // the graph's logits rows to inputs.outputs (from new_output_buffer). The
  // caller has validated the inputs, called begin_write on every written
  // slot and will call end_write after a successful return. Throws
  // InternalError for a KV state whose storage is not this backend's. If it
  // throws, written slots may hold partial rows of the positions being
  // written (begin_write marked them lost).
  virtual void execute(const StepGraph& graph, const StepInputs& inputs) = 0;
  // Host memory for n floats that execute's copies write (a session keeps
  // its logits in two). Plain heap memory here; a GPU backend returns
  // page-locked memory, which its device copies write directly, instead of
  // a copy from its own staging buffer per row and step (a 128k-entry
  // vocabulary's row is 0.5 MiB: 4 rows took ~100-200 us of host memcpy
  // per step). May be called from any thread.
  virtual HostFloats new_output_buffer(size_t n) const {
    return HostFloats(new float[n](), [](float* p) { delete[] p; });
  }
};

}  // namespace muser
