// Tensors of a step graph: weights, activations and the per-replay inputs.
//
// A graph names tensors by index; what a tensor is made of (host mmap bytes,
// a device buffer) is the executing backend's business. Three kinds:
//
// - Weight: a model tensor, bound once per engine (WeightTable). 2-D weights
//   are in ggml order: ne[0] = row length (inputs), ne[1] = rows (outputs);
//   any supported storage type. 1-D weights (norms, biases) are F32, F16 or
//   BF16 and are read as float32.
// - Activation: float32, `rows` x `cols`, row-major and contiguous. An
//   architecture reuses activation tensors across layers (the residual stream
//   is one tensor updated in place), so a graph holds a few dozen of them
//   whatever the depth.
// - Input: int32, `rows` values, filled from StepInputs at every replay
//   (token ids, positions, the rows whose logits are wanted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace muser {

using TensorId = uint32_t;
constexpr TensorId kNoTensor = ~TensorId{0};

enum class TensorKind : uint8_t { Weight, Activation, Input };

// Where an Input tensor's values come from at replay (StepInputs).
enum class InputRole : uint8_t {
  Tokens,      // rows = step rows: token id of each row
  Positions,   // rows = step rows: sequence position of each row
  OutputRows,  // rows = output rows: which step row each output row reads
};

struct TensorDesc {
  TensorKind kind = TensorKind::Activation;
  std::string name;  // for messages and debugging
  // Activation: (rows, cols) float32. Input: (rows) int32 (cols = 1).
  size_t rows = 0;
  size_t cols = 0;
  InputRole role = InputRole::Tokens;  // Input only
  uint32_t weight = 0;                 // Weight only: index into the WeightTable
};

}  // namespace muser
