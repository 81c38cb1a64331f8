// The CUDA backend: runs step graphs (graph/ops.h) on one NVIDIA GPU.
//
// - load_weights uploads every weight once: matrices as their GGUF blocks
//   (each 256-byte aligned in one allocation), vectors widened to float32.
// - KV lives in CudaKvStorage (device memory, the shared KvState layout and
//   bookkeeping).
// - execute() enqueues every op of the graph on the backend's own stream and
//   waits once; logits leave the device only for the step's output rows.
//   Activations live in one device arena shared by all graphs (steps run one
//   at a time), laid out per graph when the graph is first seen. Decode-group
//   shape classes (up to 4 rows) are captured once as a CUDA graph, keyed by
//   the step graph's id, and replayed: per-step values (tokens, positions,
//   output rows, each row's KV table, ring size and write flag) travel in one
//   pinned staging buffer copied in by the graph itself, so a step is one
//   graph launch and one wait.
// - Neighbouring ops run fused where the kernels allow it, each fused kernel
//   writing bitwise what the separate ones would: a residual Add with the
//   RmsNorm of its sum, an RmsNorm or Glu with the Q8_0/Q8_1 quantization of
//   its output for the matvec that follows, a layer's q and k Ropes.
//
// Exactness: every kernel computes a row from that row alone with reductions
// ordered by the row's own length and position (cuda_ops.h), so a row's
// logits and KV are bitwise the same alone or in any group, in any order, in
// any prefill chunking, and captured graphs replay exactly the eager launches.
//
// Thread safety: execute runs one step at a time (the engine's scheduler
// permit owns the stream); new_kv_storage may be called from any thread.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/step_capture.h"

namespace muser::cuda {

class CudaBackend final : public Backend {
 public:
  CudaBackend();
  ~CudaBackend() override;

  const char* name() const override { return "cuda"; }
  void load_weights(const WeightTable& weights) override;
  std::unique_ptr<KvStorage> new_kv_storage(const KvLayout& layout) const override;
  void execute(const StepGraph& graph, const StepInputs& inputs) override;
  // Page-locked: execute copies a row's logits straight into it.
  HostFloats new_output_buffer(size_t n) const override;

 private:
  struct DeviceWeight {
    DType type = DType::F32;
    const void* data = nullptr;  // device
    const void* packed = nullptr;  // the GEMM's packed copy (gemm_packs), in packed_weights_
    size_t ne0 = 0, ne1 = 1;
    bool vector = false;         // widened to float32
  };
  // What a graph needs beyond the shared buffers, computed when first seen.
  struct Compiled {
    std::vector<size_t> offset;          // per tensor: float offset in the arena (activations)
    size_t arena_floats = 0;
    std::array<size_t, 4> act_bytes{};   // quantization scratch per ActivationFormat
    size_t attention_bytes = 0;          // attention partials (largest Attention op)
    size_t glu_counters = 0;             // matvec_glu_quantized counters (widest Glu op)
    size_t glu_bytes = 0;                // matvec_glu_quantized's quantized output (largest Glu op)
    std::vector<const double*> rope_freqs;  // per op (Rope only)
    std::vector<uint32_t> readers;          // per tensor: the op sources that name it
    std::unique_ptr<StepCapture> capture;  // decode shapes, once captured
  };

  Compiled& compile(const StepGraph& graph);
  void ensure_capacity(const Compiled& c);
  void drop_captures() noexcept;
  const double* rope_table(const OpParams& p, TensorId divisors, const StepGraph& graph);
  // host_positions: the step's positions where the step is not captured
  // (null for a capture: its replays run at other positions).
  void enqueue(const StepGraph& graph, const Compiled& c, const std::vector<bool>& ring_layer, uint32_t n_layer,
               const int32_t* host_positions);
  float* act(const Compiled& c, TensorId t) const { return arena_.as<float>() + c.offset[t]; }
  const ActivationView& quantized(const Compiled& c, const StepGraph& graph, TensorId x, size_t k,
                                  ActivationFormat format);

  void* stream_ = nullptr;  // cudaStream_t
  const WeightTable* table_ = nullptr;
  DeviceBuffer weights_;
  DeviceBuffer packed_weights_;  // gemm_pack_weights' copies of the matrices whose type gemm_packs
  std::vector<DeviceWeight> weight_;
  std::map<std::tuple<double, size_t, uint32_t>, DeviceBuffer> rope_tables_;  // (base, n_rot, divisor weight)

  std::unordered_map<uint64_t, Compiled> compiled_;
  DeviceBuffer arena_;
  std::array<DeviceBuffer, 4> act_scratch_;
  DeviceBuffer attention_scratch_;
  DeviceBuffer glu_counters_;  // unsigned, zero between launches
  // The quantized GLU output of matvec_glu_quantized: not act_scratch_,
  // which holds the gate/up matvec's own input while its last blocks write.
  DeviceBuffer glu_scratch_;
  // Which decode steps run the RoPE + KV store and the GLU in the
  // epilogues of the matvecs before them (ops_matvec_fused.cu), one launch
  // fewer per layer each, with the same bits (tests/cuda/
  // test_cuda_engine.py compares them). By default groups of 2..4 rows fuse
  // the RoPE + KV store only: llama3-8b Q4_0 on the H200 ran 917 / 1,340
  // tok/s at 2 / 4 rows against 882 / 1,304 with the GLU fused too
  // (session 10, device call 3: the GLU epilogue's fence and counters cost
  // its gate/up launch more than the separate GLU launch costs), and single
  // rows fuse neither (session 9: 408 against 437 tok/s fused).
  // MUSER_CUDA_FUSE=groups when the backend is made: groups fuse the GLU
  // too; 1 / 0: every decode step fuses both / none.
  enum class Fuse { Groups, Always, Never, RopeGroups };
  Fuse fuse_ = Fuse::RopeGroups;
  bool fuses(size_t n_rows) const {
    return fuse_ == Fuse::Always ||
           ((fuse_ == Fuse::Groups || fuse_ == Fuse::RopeGroups) && n_rows >= 2 && n_rows <= 4);
  }
  bool fuses_glu_of(size_t n_rows) const { return fuse_ != Fuse::RopeGroups && fuses(n_rows); }
  // Captured decode steps refit their attention grids to each replay's
  // positions (step_capture.h) unless MUSER_CUDA_ATTENTION_GRID=full.
  bool fit_attention_grids_ = true;
  // Per-step values: pinned staging and its device copy (fixed size, for
  // kMaxStepRows rows, so captured graphs never see them move).
  PinnedBuffer staging_host_;
  DeviceBuffer staging_dev_;

  // Quantized activations of the current stage: (source tensor, view) per format.
  struct Memo {
    TensorId source = kNoTensor;
    ActivationView view;
  };
  std::array<Memo, 4> memo_;
};

}  // namespace muser::cuda
