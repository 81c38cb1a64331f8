// The CPU backend: the transformer forward pass of every supported
// architecture (llama, qwen2, qwen3, gemma3), on cpu::matmul for the weights
// and the f32 ops in ops_*.h for the rest, threaded with the engine's pool.
//
// Batch invariance: the matmuls compute each row independently; every other
// op is per row (norms, RoPE, activations) or per (row, head) (attention
// visits positions in ascending order). Parallelism only splits rows, heads
// and output columns, never a reduction.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/ops_activation.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/ops_rope.h"
#include "backend/cpu/vec_f16.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace muser {

class KvCache;

class CpuBackend final : public Backend {
 public:
  // The pool is shared with the engine; forwards use all its threads.
  CpuBackend(std::shared_ptr<const Model> model, std::shared_ptr<ThreadPool> pool);
  ~CpuBackend() override;

  const char* name() const override { return "cpu"; }
  std::unique_ptr<KvState> new_kv_state(size_t max_context) const override;
  void forward(const std::vector<ForwardSegment>& segments) override;

 private:
  // Norm weights and biases as float32 (converted once at load; they are
  // small and read for every row).
  struct LayerVectors {
    std::vector<float> attn_norm, ffn_norm, post_attn_norm, post_ffn_norm;
    std::vector<float> q_norm, k_norm, q_bias, k_bias, v_bias;
    size_t rope_kind = 0;  // index into rope_
  };
  // Activations of one forward, (rows, width) float32 each; reused across
  // forwards (grown, never shrunk) since forwards run one at a time.
  struct Workspace {
    std::vector<float> x, xn, q, k, v, attn, proj, gate, up, logits;
    std::vector<float> rope_cos, rope_sin;  // (rope kinds, rows, n_rot / 2)
    std::vector<std::vector<float>> scores; // per thread: attention scratch (ops_attention.h)
  };
  struct Row {
    size_t segment;
    size_t position;
  };
  // Consecutive rows of one segment whose attention runs as one task.
  struct AttentionBlock {
    size_t segment;
    size_t first_row;
    size_t n_rows;
  };

  void run_layer(uint32_t il, const std::vector<ForwardSegment>& segments,
                 const std::vector<KvCache*>& caches, size_t n_rows);
  void compute_logits(const std::vector<ForwardSegment>& segments);
  // ForwardSegment::hidden: the output-normed rows of segments that ask.
  void copy_hidden(const std::vector<ForwardSegment>& segments);
  // Runs fn(first_row, last_row) over [0, n_rows) in parallel chunks.
  template <typename Fn>
  void for_row_chunks(size_t n_rows, const Fn& fn);

  std::shared_ptr<const Model> model_;
  std::shared_ptr<ThreadPool> pool_;
  const cpu::F16VecOps& f16_;
  const cpu::ActivationOps& activations_;
  std::vector<LayerVectors> layer_vectors_;
  std::vector<float> output_norm_;
  cpu::PackedWeights packed_;  // read-only after construction
  std::vector<cpu::RopeFrequencies> rope_;
  Workspace ws_;
  std::vector<Row> rows_;
  std::vector<AttentionBlock> attention_blocks_;
  std::vector<int32_t> tokens_;
};

}  // namespace muser
