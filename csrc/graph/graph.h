// A step graph: the ops of one forward step of a model, recorded once per
// shape class and replayed for every step of that shape.
//
// A step is up to kMaxStepRows rows: 1..4 decode rows of distinct sequences,
// a prefill segment, or both. What changes from one replay to the next --
// token ids, positions, which sequence (KV) each row belongs to, which rows
// give logits -- is StepInputs, never the graph. A backend may therefore
// compile a graph once (a CUDA graph, a Metal command buffer, the CPU's
// stage plan) and reuse it for every step of the same shape class.
//
// Graphs are immutable once built; `id` is unique per process, so backends
// can key their compiled forms by it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/ops.h"
#include "graph/tensor.h"
#include "graph/weights.h"

namespace muser {

// The shape class of a step: rows in the step, rows whose logits leave it,
// and whether the final hidden states of its rows leave it too (embeddings).
struct ShapeClass {
  size_t n_rows = 0;
  size_t n_out = 0;
  bool hidden = false;
  bool operator==(const ShapeClass& o) const {
    return n_rows == o.n_rows && n_out == o.n_out && hidden == o.hidden;
  }
};

struct StepGraph {
  uint64_t id = 0;
  ShapeClass shape;
  std::vector<TensorDesc> tensors;
  std::vector<Op> ops;
  TensorId logits = kNoTensor;  // (n_out, n_vocab) activation: the step's output
  // (n_rows, n_embd): every row's final hidden state after the output norm
  // (what the output matrix would multiply); only when shape.hidden.
  TensorId hidden = kNoTensor;
  // ops[0, layer_end[il]) compute everything up to and including layer il
  // (the fault-injection backend cuts graphs there).
  std::vector<size_t> layer_end;

  const TensorDesc& tensor(TensorId t) const { return tensors[t]; }
};

// A process-unique graph id (for a graph derived from another).
uint64_t new_graph_id();

// Records ops into a StepGraph. Architecture builders use it; it checks
// shapes as ops are added (InternalError on a mismatch: a builder bug).
class GraphBuilder {
 public:
  GraphBuilder(const WeightTable& weights, ShapeClass shape);

  const WeightTable& weights() const { return weights_; }
  ShapeClass shape() const { return graph_.shape; }

  TensorId input(InputRole role);
  // A float32 (rows, cols) activation tensor.
  TensorId activation(const std::string& name, size_t rows, size_t cols);
  // The graph tensor of weight `index` (one per weight, made on first use).
  TensorId weight(uint32_t index);

  // Op recorders; each returns dst. Shapes are checked (see ops.h).
  TensorId get_rows(TensorId dst, TensorId table, TensorId ids);
  TensorId mul_mat(TensorId dst, TensorId w, TensorId x);
  TensorId rms_norm(TensorId dst, TensorId x, TensorId w, float eps, size_t group = 0);
  TensorId add(TensorId dst, TensorId a, TensorId b);
  TensorId scale(TensorId dst, TensorId x, float factor);
  TensorId rope(TensorId dst, TensorId x, TensorId positions, TensorId divisors, const OpParams& p);
  TensorId glu(TensorId dst, TensorId gate, TensorId up, GluKind kind);
  TensorId softcap(TensorId dst, TensorId x, float cap);
  TensorId slice_cols(TensorId dst, TensorId x, size_t offset);
  void kv_store(uint32_t layer, TensorId k, TensorId v);
  TensorId attention(TensorId dst, TensorId q, const OpParams& p);

  // Marks the end of layer il's ops.
  void end_layer();
  // Names the tensor holding every row's final hidden state (required when
  // shape().hidden).
  void set_hidden(TensorId t);
  // Finishes the graph with `logits` as its output.
  StepGraph finish(TensorId logits);

  const TensorDesc& desc(TensorId t) const { return graph_.tensors[t]; }

 private:
  TensorId push_op(const Op& op);
  size_t cols_of(TensorId t) const;
  void check(bool ok, const char* op, const std::string& what) const;

  const WeightTable& weights_;
  StepGraph graph_;
  std::vector<TensorId> weight_tensors_;  // by weight index, kNoTensor until used
};

}  // namespace muser
