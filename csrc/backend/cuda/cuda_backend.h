// The CUDA backend: the model's forward pass on one NVIDIA GPU.
//
// - Weights are uploaded once per engine (GGUF blocks as they are, each
//   tensor 256-byte aligned in one allocation); norm vectors become float32.
// - A session's KV is a CudaKvState: f16 planes in device memory with the
//   CPU's layout (global layers: row = position; sliding-window layers: ring
//   of min(max_context, window + kMaxSegmentRows - 1) rows, row = position %
//   ring) and the same intact/forget_from bookkeeping. The planes for the
//   whole max_context are taken when the session is made, so running out of
//   device memory is reported there (DeviceMemoryError), never mid-forward.
// - forward() enqueues every op on the backend's own stream and waits once at
//   the end; logits leave the device only for segments that asked. Decode
//   groups (1..4 one-row segments that all want logits) replay a CUDA graph
//   captured once per row count: tokens, positions and KV tables travel in
//   device buffers, so a step is one memcpy in, one graph launch, one copy out.
//
// Exactness: every kernel computes a row from that row alone with a reduction
// order fixed by the row's own length and position (cuda_ops.h), so logits
// and KV are bitwise the same alone or in any group, in any order and in any
// prefill chunking, and the graph replays exactly the eager launches.
//
// Thread safety: as Backend. forward runs one at a time (the engine's
// scheduler permit owns the stream); new_kv_state and clone may run on any
// thread while no forward touches the state concerned.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_buffer.h"
#include "model/model.h"

namespace muser::cuda {

class CudaKvState;

class CudaBackend final : public Backend {
 public:
  // Uploads the weights. Throws DeviceMemoryError when they do not fit,
  // ModelFormatError for a shape the kernels cannot run.
  explicit CudaBackend(std::shared_ptr<const Model> model);
  ~CudaBackend() override;

  const char* name() const override { return "cuda"; }
  std::unique_ptr<KvState> new_kv_state(size_t max_context) const override;
  void forward(const std::vector<ForwardSegment>& segments) override;

  // Device bytes of the uploaded weights.
  size_t weight_bytes() const { return weights_.bytes(); }

 private:
  struct Matrix {
    DType type = DType::F32;
    const void* data = nullptr;  // device
    size_t k = 0, n_out = 0;     // row length, rows
  };
  struct LayerDevice {
    Matrix q, k, v, o, gate, up, down;
    const float *attn_norm = nullptr, *ffn_norm = nullptr, *post_attn_norm = nullptr, *post_ffn_norm = nullptr;
    const float *q_norm = nullptr, *k_norm = nullptr, *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr;
    size_t rope_kind = 0;
    double rope_scale = 1.0;
  };
  // Per-row inputs of one forward, staged in pinned memory and copied to the
  // device in one transfer. Field order = the layout of both buffers.
  struct RowInputs;

  void upload_weights();
  void ensure_workspace(size_t n_rows, size_t n_logits);
  // Enqueues the whole forward for the rows staged in meta_host_ (already
  // copied to the device by the caller's enqueued memcpy). `fail_after_layer`
  // is the fault-injection hook (-1: none).
  void enqueue_forward(size_t n_rows, size_t n_logits, int64_t fail_after_layer);
  const ActivationView& activations(const Matrix& m, const float* x, size_t n_rows);
  void run_matrix(const Matrix& m, const float* x, size_t n_rows, float* y);
  void sync();
  void drop_graphs() noexcept;

  std::shared_ptr<const Model> model_;
  void* stream_ = nullptr;  // cudaStream_t
  DeviceBuffer weights_;
  Matrix token_embd_, output_;
  const float* output_norm_ = nullptr;
  std::vector<LayerDevice> layers_;
  DeviceBuffer rope_freqs_;  // (kinds, n_rot / 2) doubles
  size_t n_rope_kinds_ = 0;

  // Workspace, sized for rows_capacity_ rows (grows; graphs drop on growth).
  size_t rows_capacity_ = 0, logits_capacity_ = 0;
  DeviceBuffer ws_x_, ws_xn_, ws_proj_, ws_q_, ws_k_, ws_v_, ws_attn_, ws_gate_, ws_up_, ws_logits_, ws_out_rows_;
  std::array<DeviceBuffer, 4> ws_act_;  // one per ActivationFormat
  DeviceBuffer meta_dev_;
  PinnedBuffer meta_host_;
  PinnedBuffer logits_host_;
  // Memo of the last quantization per format within one stage.
  struct ActMemo {
    const float* source = nullptr;
    size_t n_rows = 0, k = 0;
    ActivationView view;
  };
  std::array<ActMemo, 4> act_memo_;

  // Captured decode-group graphs, by row count - 1 (cudaGraphExec_t).
  std::array<void*, 4> graphs_{};
};

}  // namespace muser::cuda
