// The Metal backend: runs step graphs (graph/graph.h) with the kernels of
// metal/*.metal on the engine's one MTLCommandQueue.
//
// - load_weights uploads every weight once into its own shared buffer
//   (matrices as stored, vectors converted to float32).
// - A step is ONE command buffer: every op of the graph is encoded into one
//   compute encoder (serial dispatches), committed once and waited for once,
//   whether the step is a decode group of 1..4 rows or a prefill chunk.
//   Graphs are replayed: the activation layout and RoPE settings of a graph
//   are computed once per graph id (MetalPlan); per step only the inputs
//   (tokens, positions, attention ranges, RoPE cos/sin rows) are written.
// - Which kernel runs, with which grid, is decided by ops_encode.cpp (plain
//   C++); this file only walks the graph and hands slices to it.
//
// Exactness: every kernel computes a row from that row alone, so a row's
// logits are bitwise the same alone, in a decode group or inside a prefill
// chunk. Against the CPU backend the results differ within tolerance (the
// matmuls multiply float activations with dequantized weights instead of
// quantizing activations to int8; reductions run in float in other orders).
#pragma once

#include <list>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/metal/metal_device.h"

namespace muser::metal {

struct MetalPlan;

class MetalBackend final : public Backend {
 public:
  explicit MetalBackend(std::shared_ptr<MetalDevice> device);
  ~MetalBackend() override;

  const char* name() const override { return "metal"; }
  void load_weights(const WeightTable& weights) override;
  std::unique_ptr<KvStorage> new_kv_storage(const KvLayout& layout) const override;
  void execute(const StepGraph& graph, const StepInputs& inputs) override;

  static constexpr size_t kPlanCacheSize = 32;

 private:
  const MetalPlan& plan_for(const StepGraph& graph);
  // Makes `buffer` hold at least `bytes` (reallocating, contents not kept).
  void reserve(DeviceBuffer& buffer, size_t bytes);

  std::shared_ptr<MetalDevice> device_;
  const WeightTable* table_ = nullptr;
  std::vector<DeviceBuffer> weights_;              // by weight index
  std::vector<std::vector<float>> host_vectors_;   // 1-D weights as float32 (RoPE divisors)
  std::list<std::unique_ptr<MetalPlan>> plans_;    // most recently used first
  DeviceBuffer arena_;    // activations of the current step
  DeviceBuffer scratch_;  // inputs, attention ranges, RoPE tables of the current step
};

}  // namespace muser::metal
