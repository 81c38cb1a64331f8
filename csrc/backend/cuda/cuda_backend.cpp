#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_kv_storage.h"
#include "backend/registry.h"
#include "core/env_switch.h"
#include "core/error.h"
#include "core/limits.h"
#include "tensor/half_float.h"

namespace muser {
namespace {

// Above the CPU (10): "auto" takes the GPU when one is usable.
const BackendRegistration registration(
    "cuda", 20, [] { return cuda::probe_device(); },
    [](const BackendContext&) -> std::unique_ptr<Backend> { return std::make_unique<cuda::CudaBackend>(); });

}  // namespace

namespace cuda {
namespace {

size_t align256(size_t n) { return (n + 255) & ~static_cast<size_t>(255); }
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Decode-group shape classes (1..4 rows) are captured as CUDA graphs; longer
// steps run eagerly (their launch overhead is small beside their work).
// The prefill GEMM's packed weight copies may take at most 1/kPackedShareOfFree
// of the device memory free after the blocks are uploaded (load_weights).
constexpr size_t kPackedShareOfFree = 4;
constexpr size_t kMaxCapturedRows = 4;
// Compiled graphs kept at most (prefill remainders make many shape classes).
constexpr size_t kMaxCompiled = 256;

// The staging layout, for kMaxStepRows rows: per row token, position, ring
// rows, write flag, KV table pointer; per output row its step row.
struct Staging {
  static size_t bytes() { return kMaxStepRows * (5 * sizeof(int32_t) + sizeof(void*)); }
  const uint16_t* const** tables;
  int32_t *tokens, *positions, *ring_rows, *writes, *output_rows;
  static Staging at(void* base) {
    Staging s;
    uint8_t* p = static_cast<uint8_t*>(base);
    s.tables = reinterpret_cast<const uint16_t* const**>(p);
    int32_t* ints = reinterpret_cast<int32_t*>(p + kMaxStepRows * sizeof(void*));
    s.tokens = ints;
    s.positions = ints + kMaxStepRows;
    s.ring_rows = ints + 2 * kMaxStepRows;
    s.writes = ints + 3 * kMaxStepRows;
    s.output_rows = ints + 4 * kMaxStepRows;
    return s;
  }
};

AttentionShape attention_shape(const OpParams& p, uint32_t n_layer, bool ring) {
  AttentionShape shape;
  shape.n_layer = n_layer;
  shape.layer = p.layer;
  shape.ring = ring;
  shape.n_head = p.n_head;
  shape.n_head_kv = p.n_head_kv;
  shape.head_dim_k = p.head_dim_k;
  shape.head_dim_v = p.head_dim_v;
  shape.window = p.window;
  shape.scale = p.scalar;
  return shape;
}

std::vector<float> widen_vector(const WeightDesc& w) {
  const size_t n = static_cast<size_t>(w.ne[0] * w.ne[1]);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    switch (w.type) {
      case DType::F32: std::memcpy(&out[i], w.data + 4 * i, 4); break;
      case DType::F16: std::memcpy(&h, w.data + 2 * i, 2); out[i] = fp16_to_fp32(h); break;
      case DType::BF16: std::memcpy(&h, w.data + 2 * i, 2); out[i] = bf16_to_fp32(h); break;
      default:
        throw ModelFormatError("[cuda backend] vector weight '" + w.name + "' has type " + dtype_info(w.type).name +
                               ": expected F32, F16 or BF16");
    }
  }
  return out;
}

}  // namespace

CudaBackend::CudaBackend() {
  if (env_is("MUSER_CUDA_FUSE", "1")) fuse_ = Fuse::Always;
  if (env_is("MUSER_CUDA_FUSE", "0")) fuse_ = Fuse::Never;
  if (env_is("MUSER_CUDA_FUSE", "groups")) fuse_ = Fuse::Groups;
  fit_attention_grids_ = !env_is("MUSER_CUDA_ATTENTION_GRID", "full");
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = stream;
  try {
    staging_host_ = PinnedBuffer(Staging::bytes(), "step inputs");
    staging_dev_ = DeviceBuffer(Staging::bytes(), "step inputs");
  } catch (...) {
    cudaStreamDestroy(stream);
    throw;
  }
}

CudaBackend::~CudaBackend() {
  drop_captures();
  if (stream_ != nullptr) {
    cudaStreamSynchronize(as_stream(stream_));
    cudaStreamDestroy(as_stream(stream_));
  }
}

void CudaBackend::drop_captures() noexcept {
  for (auto& [id, c] : compiled_) c.capture.reset();
}

void CudaBackend::load_weights(const WeightTable& table) {
  table_ = &table;
  // Layout pass, then one allocation and one copy per weight.
  std::vector<size_t> offset(table.size());
  std::vector<std::vector<float>> widened(table.size());
  size_t total = 0;
  for (uint32_t i = 0; i < table.size(); ++i) {
    const WeightDesc& w = table[i];
    offset[i] = total;
    if (w.n_dims == 1) {
      widened[i] = widen_vector(w);
      total += align256(widened[i].size() * sizeof(float));
    } else {
      if (w.ne[0] % 32 != 0 || w.ne[0] % dtype_info(w.type).block_elems != 0) {
        throw ModelFormatError("[cuda backend] tensor '" + w.name + "' has rows of " + std::to_string(w.ne[0]) +
                               " elements: expected a multiple of 32 and of its block size");
      }
      total += align256(w.n_bytes);
    }
  }
  weights_ = DeviceBuffer(total, "the model's weights (" + std::to_string(table.size()) + " tensors)");
  weight_.resize(table.size());
  for (uint32_t i = 0; i < table.size(); ++i) {
    const WeightDesc& w = table[i];
    uint8_t* dst = weights_.as<uint8_t>() + offset[i];
    DeviceWeight& d = weight_[i];
    d.type = w.n_dims == 1 ? DType::F32 : w.type;
    d.data = dst;
    d.ne0 = w.ne[0];
    d.ne1 = w.ne[1];
    d.vector = w.n_dims == 1;
    if (d.vector) {
      copy_to_device(dst, widened[i].data(), widened[i].size() * sizeof(float), "upload weights");
    } else {
      copy_to_device(dst, w.data, w.n_bytes, "upload weights");
    }
  }
  // The prefill GEMM's packed copies (gemm_packs: Q4_0 and Q4_K unless
  // MUSER_CUDA_GEMM says otherwise) of every matrix a product may read,
  // written on the device from the uploaded blocks. They sit beside the
  // blocks, which the decode matvec keeps reading: llama3-8b's layers take
  // 4.3 GiB more (cuda_ops.h, gemm_packs).
  std::vector<size_t> packed_offset(table.size(), 0);
  size_t packed_total = 0;
  for (uint32_t i = 0; i < table.size(); ++i) {
    const DeviceWeight& d = weight_[i];
    if (d.vector || table[i].lookup_only) continue;
    const size_t bytes = gemm_packed_weight_bytes(d.type, d.ne1, d.ne0);
    packed_offset[i] = packed_total;
    packed_total += align256(bytes);
  }
  // The copies double a Q4_0 model's weight memory for a 1.8x faster
  // prefill GEMM, so they are made only when they take at most a quarter of
  // the memory still free after the blocks (the slots' KV, which grows with
  // the sequences, and the user's other allocations need the rest), and
  // skipped when the allocation fails anyway: without a copy a matrix's
  // GEMM runs the first version on the blocks, with the same bits.
  packed_weights_ = DeviceBuffer(0, "");
  size_t free_bytes = 0, total_bytes = 0;
  device_memory(&free_bytes, &total_bytes);
  if (packed_total != 0 && packed_total <= free_bytes / kPackedShareOfFree) {
    try {
      packed_weights_ = DeviceBuffer(packed_total, "the prefill GEMM's packed weights");
    } catch (const DeviceMemoryError&) {
      // No copies: packed_weights_ stays empty (the throwing constructor
      // assigned nothing), and allocation_failed cleared the CUDA error.
    }
  }
  if (packed_weights_.get() != nullptr) {
    for (uint32_t i = 0; i < table.size(); ++i) {
      DeviceWeight& d = weight_[i];
      if (d.vector || table[i].lookup_only || gemm_packed_weight_bytes(d.type, d.ne1, d.ne0) == 0) continue;
      void* dst = packed_weights_.as<uint8_t>() + packed_offset[i];
      gemm_pack_weights(d.type, d.data, d.ne1, d.ne0, dst, stream_);
      d.packed = dst;
    }
    check_cuda(cudaStreamSynchronize(as_stream(stream_)), "pack weights");
  }
}

std::unique_ptr<KvStorage> CudaBackend::new_kv_storage(const KvLayout& layout) const {
  return std::make_unique<CudaKvStorage>(layout);
}

const double* CudaBackend::rope_table(const OpParams& p, TensorId divisors, const StepGraph& graph) {
  const uint32_t divisor_weight = divisors == kNoTensor ? ~uint32_t{0} : graph.tensor(divisors).weight;
  const auto key = std::make_tuple(p.rope_base, p.n_rot, divisor_weight);
  auto found = rope_tables_.find(key);
  if (found == rope_tables_.end()) {
    // The CPU's table, in double: base^(-2i/n_rot) [/ divisor_i].
    std::vector<double> inv(p.n_rot / 2);
    std::vector<float> div;
    if (divisors != kNoTensor) div = widen_vector((*table_)[divisor_weight]);
    for (size_t i = 0; i < inv.size(); ++i) {
      inv[i] = std::pow(p.rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(p.n_rot));
      if (!div.empty()) inv[i] /= static_cast<double>(div[i]);
    }
    DeviceBuffer buf(std::max<size_t>(inv.size(), 1) * sizeof(double), "RoPE frequencies");
    if (!inv.empty()) {
      copy_to_device(buf.get(), inv.data(), inv.size() * sizeof(double), "RoPE frequencies");
    }
    found = rope_tables_.emplace(key, std::move(buf)).first;
  }
  return found->second.as<double>();
}

CudaBackend::Compiled& CudaBackend::compile(const StepGraph& graph) {
  auto found = compiled_.find(graph.id);
  if (found != compiled_.end()) return found->second;
  if (compiled_.size() >= kMaxCompiled) {
    drop_captures();
    compiled_.clear();
  }
  Compiled c;
  c.offset.assign(graph.tensors.size(), 0);
  for (TensorId t = 0; t < graph.tensors.size(); ++t) {
    const TensorDesc& d = graph.tensors[t];
    if (d.kind != TensorKind::Activation) continue;
    c.offset[t] = c.arena_floats;
    c.arena_floats += align256(d.rows * d.cols * sizeof(float)) / sizeof(float);
  }
  c.rope_freqs.assign(graph.ops.size(), nullptr);
  c.readers.assign(graph.tensors.size(), 0);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    for (const TensorId src : op.src) {
      if (src != kNoTensor) ++c.readers[src];
    }
    if (op.kind == OpKind::MatMul) {
      const DeviceWeight& w = weight_[graph.tensor(op.src[0]).weight];
      const ActivationFormat f = activation_format(w.type);
      const size_t rows = graph.tensor(op.src[1]).rows;
      size_t& need = c.act_bytes[static_cast<uint32_t>(f)];
      need = std::max(need, activation_bytes(f, rows, w.ne0));
    } else if (op.kind == OpKind::Rope) {
      c.rope_freqs[i] = rope_table(op.p, op.src[2], graph);
    } else if (op.kind == OpKind::Attention) {
      const size_t rows = graph.tensor(op.dst).rows;
      c.attention_bytes = std::max(c.attention_bytes, attention_scratch_bytes(attention_shape(op.p, 0, false), rows));
    } else if (op.kind == OpKind::Glu) {
      const TensorDesc& out = graph.tensor(op.dst);
      c.glu_counters = std::max(c.glu_counters, glu_counter_count(out.cols));
      if (out.cols % 32 == 0) {
        c.glu_bytes = std::max({c.glu_bytes, activation_bytes(ActivationFormat::Q8_0, out.rows, out.cols),
                                activation_bytes(ActivationFormat::Q8_1, out.rows, out.cols)});
      }
    }
  }
  return compiled_.emplace(graph.id, std::move(c)).first->second;
}

void CudaBackend::ensure_capacity(const Compiled& c) {
  // Captured graphs hold the addresses of these buffers: growing any of them
  // drops every capture (they are re-captured on their next step).
  if (arena_.bytes() < c.arena_floats * sizeof(float)) {
    drop_captures();
    arena_ = DeviceBuffer(0, "");
    arena_ = DeviceBuffer(c.arena_floats * sizeof(float), "activations of a step");
  }
  for (uint32_t f = 0; f < 4; ++f) {
    if (act_scratch_[f].bytes() < c.act_bytes[f]) {
      drop_captures();
      act_scratch_[f] = DeviceBuffer(0, "");
      act_scratch_[f] = DeviceBuffer(c.act_bytes[f], "quantized activations of a step");
    }
  }
  if (attention_scratch_.bytes() < c.attention_bytes) {
    drop_captures();
    attention_scratch_ = DeviceBuffer(0, "");
    attention_scratch_ = DeviceBuffer(c.attention_bytes, "attention partials of a step");
    clear_attention_scratch(attention_scratch_.get(), attention_scratch_.bytes(), stream_);
  }
  if (glu_counters_.bytes() < c.glu_counters * sizeof(unsigned)) {
    drop_captures();
    glu_counters_ = DeviceBuffer(0, "");
    glu_counters_ = DeviceBuffer(c.glu_counters * sizeof(unsigned), "GLU epilogue counters");
    check_cuda(cudaMemsetAsync(glu_counters_.get(), 0, glu_counters_.bytes(), as_stream(stream_)),
               "clear GLU epilogue counters");
  }
  if (glu_scratch_.bytes() < c.glu_bytes) {
    drop_captures();
    glu_scratch_ = DeviceBuffer(0, "");
    glu_scratch_ = DeviceBuffer(c.glu_bytes, "quantized GLU output of a step");
  }
}

const ActivationView& CudaBackend::quantized(const Compiled& c, const StepGraph& graph, TensorId x, size_t k,
                                             ActivationFormat format) {
  Memo& m = memo_[static_cast<uint32_t>(format)];
  if (m.source != x) {
    m.view = quantize_activations(format, act(c, x), graph.tensor(x).rows, k,
                                  act_scratch_[static_cast<uint32_t>(format)].get(), stream_);
    m.source = x;
  }
  return m.view;
}

void CudaBackend::enqueue(const StepGraph& graph, const Compiled& c, const std::vector<bool>& ring_layer,
                          uint32_t n_layer, const int32_t* host_positions) {
  cudaStream_t stream = as_stream(stream_);
  check_cuda(cudaMemcpyAsync(staging_dev_.get(), staging_host_.get(), Staging::bytes(), cudaMemcpyHostToDevice,
                             stream),
             "copy step inputs");
  const Staging dev = Staging::at(staging_dev_.get());
  KvRows kv;
  kv.tables = dev.tables;
  kv.positions = dev.positions;
  kv.ring_rows = dev.ring_rows;
  kv.writes = dev.writes;
  kv.host_positions = host_positions;
  auto ints = [&](TensorId t) -> const int32_t* {
    switch (graph.tensor(t).role) {
      case InputRole::Tokens: return dev.tokens;
      case InputRole::Positions: return dev.positions;
      case InputRole::OutputRows: return dev.output_rows;
    }
    return nullptr;
  };
  auto weight_f32 = [&](TensorId t) -> const float* {
    return t == kNoTensor ? nullptr : static_cast<const float*>(weight_[graph.tensor(t).weight].data);
  };
  for (Memo& m : memo_) m.source = kNoTensor;
  // The Q8_0 / Q8_1 format in which op i + 1, a matvec, reads the rows op i
  // (an RmsNorm over whole rows, a Glu or an Attention) writes; F32 when op
  // i cannot hand them over already quantized (rms_norm_quantized,
  // glu_quantized and attention_quantized then save the quantization's
  // launch).
  auto quantized_by_op = [&](size_t i) -> ActivationFormat {
    const Op& op = graph.ops[i];
    const TensorDesc& out = graph.tensor(op.dst);
    const bool whole_rows = op.kind != OpKind::RmsNorm || op.p.group == 0 || op.p.group == out.cols;
    if (i + 1 >= graph.ops.size() || !whole_rows || out.cols % 32 != 0) return ActivationFormat::F32;
    const Op& next = graph.ops[i + 1];
    if (next.kind != OpKind::MatMul || next.src[1] != op.dst) return ActivationFormat::F32;
    const DeviceWeight& w = weight_[graph.tensor(next.src[0]).weight];
    const ActivationFormat f = activation_format(w.type);
    const bool q8_32 = f == ActivationFormat::Q8_0 || f == ActivationFormat::Q8_1;
    return q8_32 && w.ne0 == out.cols ? f : ActivationFormat::F32;
  };

  // Whether op i, an Add of two activations, is followed by the RmsNorm
  // (over whole rows) of its sum: add_rms_norm runs both.
  auto adds_into_norm = [&](size_t i) -> bool {
    if (i + 1 >= graph.ops.size()) return false;
    const Op& op = graph.ops[i];
    const Op& next = graph.ops[i + 1];
    const TensorDesc& sum = graph.tensor(op.dst);
    if (next.kind != OpKind::RmsNorm || next.src[0] != op.dst) return false;
    const TensorDesc& out = graph.tensor(next.dst);
    return (next.p.group == 0 || next.p.group == out.cols) && out.rows == sum.rows && out.cols == sum.cols;
  };

  // Whether ops i and i + 1 are two in-place Ropes at the same positions
  // with the same frequencies and head size (a layer's q and k): rope_pair
  // runs both.
  auto ropes_pair = [&](size_t i) -> bool {
    if (i + 1 >= graph.ops.size()) return false;
    const Op& a = graph.ops[i];
    const Op& b = graph.ops[i + 1];
    return b.kind == OpKind::Rope && a.dst == a.src[0] && b.dst == b.src[0] && a.dst != b.dst &&
           a.src[1] == b.src[1] && c.rope_freqs[i] == c.rope_freqs[i + 1] && a.p.head_dim_k == b.p.head_dim_k &&
           a.p.n_rot == b.p.n_rot && a.p.rope_style == b.p.rope_style &&
           a.p.rope_freq_scale == b.p.rope_freq_scale && graph.tensor(a.dst).rows == graph.tensor(b.dst).rows;
  };

  // Whether op i + 2 is the KvStore of the k that the rope pair at op i
  // rotates (op i + 1, whole rows of its heads) and of a v none of them
  // writes, at the pair's rows: rope_pair_kv runs all three.
  auto stores_rotated_k = [&](size_t i) -> bool {
    if (i + 2 >= graph.ops.size()) return false;
    const Op& q = graph.ops[i];
    const Op& k = graph.ops[i + 1];
    const Op& store = graph.ops[i + 2];
    if (store.kind != OpKind::KvStore || store.src[0] != k.dst || store.src[1] == q.dst || store.src[1] == k.dst) {
      return false;
    }
    const TensorDesc& kt = graph.tensor(k.dst);
    const TensorDesc& vt = graph.tensor(store.src[1]);
    return kt.cols == k.p.n_head * k.p.head_dim_k && vt.rows == kt.rows && kt.rows == graph.tensor(q.dst).rows;
  };

  // How many matmuls from op i on (i itself a MatMul; at most
  // kMaxDecodeTargets) read the same activations with weights of one type
  // and row length, each writing its own tensor (neither the input nor
  // another's output).
  auto shares_input = [&](size_t i) -> size_t {
    const Op& first = graph.ops[i];
    const DeviceWeight& w0 = weight_[graph.tensor(first.src[0]).weight];
    size_t n = 1;
    while (n < kMaxDecodeTargets && i + n < graph.ops.size()) {
      const Op& next = graph.ops[i + n];
      if (next.kind != OpKind::MatMul || next.src[1] != first.src[1] || next.dst == first.src[1]) break;
      const DeviceWeight& w = weight_[graph.tensor(next.src[0]).weight];
      if (w.type != w0.type || w.ne0 != w0.ne0) break;
      bool distinct = true;
      for (size_t j = 0; j < n; ++j) distinct = distinct && graph.ops[i + j].dst != next.dst;
      if (!distinct) break;
      ++n;
    }
    return n;
  };

  // Where op i (quantized_by_op(i) not F32) writes its floats: nowhere
  // (null) when the matmuls right after it, which take its quantized view
  // from the memo, are all that read it, and it is not a step output (a
  // llama3-8b prefill's norms and GLUs wrote ~600 MB of floats nobody read).
  auto floats_read = [&](size_t i) -> float* {
    const TensorId t = graph.ops[i].dst;
    const bool read_as_floats = t == graph.logits || t == graph.hidden || c.readers[t] != shares_input(i + 1);
    return read_as_floats ? act(c, t) : nullptr;
  };

  // Whether the q/k/v matmuls at ops i..i + 2 (one launch) are followed by
  // the rope pair of q and k and the KvStore of k and v that rope_pair_kv
  // would run (ops i + 3..i + 5), in a form matvec_rope_kv runs in the
  // matvec's epilogue: normal-style RoPE over every head of q and k.
  auto fuses_rope_kv = [&](size_t i, DType type, size_t n_rows) -> bool {
    if (!fuses(n_rows) || i + 5 >= graph.ops.size() || graph.ops[i + 3].kind != OpKind::Rope) return false;
    if (!ropes_pair(i + 3) || !stores_rotated_k(i + 3)) return false;
    const Op& rq = graph.ops[i + 3];
    const Op& rk = graph.ops[i + 4];
    const Op& store = graph.ops[i + 5];
    if (rq.dst != graph.ops[i].dst || rk.dst != graph.ops[i + 1].dst || store.src[1] != graph.ops[i + 2].dst) {
      return false;
    }
    const size_t q_out = graph.tensor(rq.dst).cols, k_out = graph.tensor(rk.dst).cols;
    return rq.p.n_head * rq.p.head_dim_k == q_out && rk.p.n_head * rk.p.head_dim_k == k_out &&
           matvec_rope_kv_fits(type, q_out, k_out, rq.p.head_dim_k, rq.p.n_rot, rq.p.rope_style == RopeStyle::Neox,
                               n_rows);
  };
  // Whether the gate/up matmuls at ops i, i + 1 (one launch) are followed by
  // the Glu of their outputs whose rows the next matmul reads as Q8_0 /
  // Q8_1: matvec_glu_quantized runs it in the matvec's epilogue.
  auto fuses_glu = [&](size_t i, DType type, size_t n_rows) -> bool {
    if (!fuses_glu_of(n_rows) || i + 2 >= graph.ops.size()) return false;
    const Op& glu_op = graph.ops[i + 2];
    if (glu_op.kind != OpKind::Glu || glu_op.src[0] != graph.ops[i].dst || glu_op.src[1] != graph.ops[i + 1].dst) {
      return false;
    }
    const TensorDesc& out = graph.tensor(glu_op.dst);
    const size_t width = graph.tensor(glu_op.src[0]).cols;
    return out.cols == width && out.rows == n_rows && graph.tensor(glu_op.src[1]).cols == width &&
           glu_scratch_.bytes() >= activation_bytes(ActivationFormat::Q8_1, n_rows, width) &&
           matvec_glu_fits(type, width, width, quantized_by_op(i + 2), n_rows);
  };

  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    const OpParams& p = op.p;
    const TensorDesc* dst = op.dst != kNoTensor ? &graph.tensor(op.dst) : nullptr;
    Memo made_here;   // a quantization this op wrote along with its output
    size_t ran = 1;   // ops this step of the loop ran (Add + RmsNorm, two Ropes, matmuls sharing x: fused)
    switch (op.kind) {
      case OpKind::GetRows: {
        const TensorDesc& table = graph.tensor(op.src[0]);
        if (table.kind == TensorKind::Weight) {
          const DeviceWeight& w = weight_[table.weight];
          get_rows(w.type, w.data, w.ne0, ints(op.src[1]), dst->rows, act(c, op.dst), stream_);
        } else {
          gather_rows(act(c, op.src[0]), table.cols, ints(op.src[1]), dst->rows, act(c, op.dst), stream_);
        }
        break;
      }
      case OpKind::MatMul: {
        const DeviceWeight& w = weight_[graph.tensor(op.src[0]).weight];
        const ActivationView& x = quantized(c, graph, op.src[1], w.ne0, activation_format(w.type));
        // This matmul and the next ones reading the same x with weights of
        // the same type and row length (a layer's q, k, v; gate and up) in
        // one matvec_targets call: one launch for a decode group.
        MatvecTarget targets[kMaxDecodeTargets];
        targets[0] = {w.data, w.ne1, act(c, op.dst), w.ne1, w.packed};
        ran = shares_input(i);
        for (size_t j = 1; j < ran; ++j) {
          const Op& next = graph.ops[i + j];
          const DeviceWeight& wj = weight_[graph.tensor(next.src[0]).weight];
          targets[j] = {wj.data, wj.ne1, act(c, next.dst), wj.ne1, wj.packed};
        }
        if (ran == 3 && fuses_rope_kv(i, w.type, dst->rows)) {
          // q, k, v, their RoPE and the KV store in one launch.
          const Op& rope_q = graph.ops[i + 3];
          const Op& store = graph.ops[i + 5];
          RopeKvTail tail;
          tail.head_dim = rope_q.p.head_dim_k;
          tail.n_rot = rope_q.p.n_rot;
          tail.positions = ints(rope_q.src[1]);
          tail.inv_freq = c.rope_freqs[i + 3];
          tail.position_scale = rope_q.p.rope_freq_scale;
          tail.kv = kv;
          tail.n_layer = n_layer;
          tail.layer = store.p.layer;
          tail.ring = ring_layer[store.p.layer];
          matvec_rope_kv(w.type, targets, x, dst->rows, tail, stream_);
          ran = 6;
          break;
        }
        if (ran == 2 && fuses_glu(i, w.type, dst->rows)) {
          // gate, up, the GLU and its quantization for the down matmul in one launch.
          const Op& glu_op = graph.ops[i + 2];
          const ActivationFormat f = quantized_by_op(i + 2);
          made_here.source = glu_op.dst;
          made_here.view = matvec_glu_quantized(
              w.type, targets, x, dst->rows, glu_op.p.glu == GluKind::Silu ? Glu::Silu : Glu::GeluTanh,
              act(c, glu_op.dst), f, glu_scratch_.get(), glu_counters_.as<unsigned>(), stream_);
          ran = 3;
          break;
        }
        matvec_targets(w.type, targets, ran, x, dst->rows, stream_);
        break;
      }
      case OpKind::RmsNorm: {
        const ActivationFormat f = quantized_by_op(i);
        if (f != ActivationFormat::F32) {
          made_here.source = op.dst;
          made_here.view = rms_norm_quantized(act(c, op.src[0]), weight_f32(op.src[1]), dst->rows, dst->cols, p.eps,
                                              floats_read(i), f, act_scratch_[static_cast<uint32_t>(f)].get(),
                                              stream_);
          break;
        }
        const size_t group = p.group != 0 ? p.group : dst->cols;
        rms_norm(act(c, op.src[0]), weight_f32(op.src[1]), dst->rows * dst->cols / group, group, p.eps,
                 act(c, op.dst), stream_);
        break;
      }
      case OpKind::Add: {
        const TensorDesc& b = graph.tensor(op.src[1]);
        if (b.kind != TensorKind::Weight && adds_into_norm(i)) {
          // The residual add and the norm of its sum in one launch (the
          // norm also quantizes when its matvec reads Q8_0 / Q8_1).
          const Op& norm = graph.ops[i + 1];
          const ActivationFormat f = quantized_by_op(i + 1);
          float* norm_out = f != ActivationFormat::F32 ? floats_read(i + 1) : act(c, norm.dst);
          const ActivationView view =
              add_rms_norm(act(c, op.dst), act(c, op.src[0]), act(c, op.src[1]), weight_f32(norm.src[1]), dst->rows,
                           dst->cols, norm.p.eps, norm_out, f, act_scratch_[static_cast<uint32_t>(f)].get(),
                           stream_);
          if (f != ActivationFormat::F32) {
            made_here.source = norm.dst;
            made_here.view = view;
          }
          ran = 2;
          break;
        }
        if (b.kind == TensorKind::Weight) {
          add(act(c, op.dst), act(c, op.src[0]), weight_f32(op.src[1]), dst->rows, dst->cols, 0, stream_);
        } else {
          add(act(c, op.dst), act(c, op.src[0]), act(c, op.src[1]), dst->rows, dst->cols, dst->cols, stream_);
        }
        break;
      }
      case OpKind::Scale:
        scale(act(c, op.dst), act(c, op.src[0]), dst->rows * dst->cols, p.scalar, stream_);
        break;
      case OpKind::Rope: {
        if (ropes_pair(i)) {
          // q and k of a layer in one launch (both in place), with the KV
          // store of the rotated k and of v when it comes next.
          const Op& next = graph.ops[i + 1];
          if (stores_rotated_k(i)) {
            const Op& store = graph.ops[i + 2];
            const TensorDesc& v = graph.tensor(store.src[1]);
            rope_pair_kv(act(c, op.dst), p.n_head, act(c, next.dst), next.p.n_head, dst->rows, p.head_dim_k,
                         p.n_rot, p.rope_style == RopeStyle::Neox, ints(op.src[1]), c.rope_freqs[i],
                         p.rope_freq_scale, kv, n_layer, store.p.layer, ring_layer[store.p.layer],
                         act(c, store.src[1]), v.cols, stream_);
            ran = 3;
            break;
          }
          rope_pair(act(c, op.dst), p.n_head, act(c, next.dst), next.p.n_head, dst->rows, p.head_dim_k, p.n_rot,
                    p.rope_style == RopeStyle::Neox, ints(op.src[1]), c.rope_freqs[i], p.rope_freq_scale, stream_);
          ran = 2;
          break;
        }
        if (op.dst != op.src[0]) {
          check_cuda(cudaMemcpyAsync(act(c, op.dst), act(c, op.src[0]), dst->rows * dst->cols * sizeof(float),
                                     cudaMemcpyDeviceToDevice, stream),
                     "rope copy");
        }
        rope(act(c, op.dst), dst->rows, p.n_head, p.head_dim_k, p.n_rot, p.rope_style == RopeStyle::Neox,
             ints(op.src[1]), c.rope_freqs[i], p.rope_freq_scale, stream_);
        break;
      }
      case OpKind::Glu: {
        const Glu kind = p.glu == GluKind::Silu ? Glu::Silu : Glu::GeluTanh;
        const ActivationFormat f = quantized_by_op(i);
        if (f != ActivationFormat::F32) {
          made_here.source = op.dst;
          made_here.view = glu_quantized(kind, floats_read(i), act(c, op.src[0]), act(c, op.src[1]), dst->rows,
                                         dst->cols, f, act_scratch_[static_cast<uint32_t>(f)].get(), stream_);
          break;
        }
        glu(kind, act(c, op.dst), act(c, op.src[0]), act(c, op.src[1]), dst->rows * dst->cols, stream_);
        break;
      }
      case OpKind::Softcap:
        softcap(act(c, op.dst), act(c, op.src[0]), dst->rows * dst->cols, p.scalar, stream_);
        break;
      case OpKind::SliceCols: {
        const TensorDesc& src = graph.tensor(op.src[0]);
        slice_cols(act(c, op.dst), act(c, op.src[0]), dst->rows, src.cols, p.offset, dst->cols, stream_);
        break;
      }
      case OpKind::KvStore: {
        const TensorDesc& k = graph.tensor(op.src[0]);
        const TensorDesc& v = graph.tensor(op.src[1]);
        write_kv(kv, n_layer, p.layer, ring_layer[p.layer], act(c, op.src[0]), k.cols, act(c, op.src[1]), v.cols,
                 k.rows, stream_);
        break;
      }
      case OpKind::Attention: {
        const AttentionShape shape = attention_shape(p, n_layer, ring_layer[p.layer]);
        const ActivationFormat f = quantized_by_op(i);
        if (f != ActivationFormat::F32 && shape.head_dim_v % 32 == 0) {
          // The output projection's input quantized by the attention launch itself.
          made_here.source = op.dst;
          made_here.view = attention_quantized(kv, shape, act(c, op.src[0]), dst->rows, act(c, op.dst),
                                               attention_scratch_.get(), f,
                                               act_scratch_[static_cast<uint32_t>(f)].get(), stream_);
          break;
        }
        attention(kv, shape, act(c, op.src[0]), dst->rows, act(c, op.dst), attention_scratch_.get(), stream_);
        break;
      }
    }
    // A quantization of a tensor these ops rewrote is stale; one they wrote
    // themselves replaces its format's memo (the scratch now holds it).
    for (size_t k = i; k < i + ran; ++k) {
      for (Memo& m : memo_) {
        if (m.source == graph.ops[k].dst) m.source = kNoTensor;
      }
    }
    if (made_here.source != kNoTensor) memo_[static_cast<uint32_t>(made_here.view.format)] = made_here;
    i += ran - 1;
  }
}

HostFloats CudaBackend::new_output_buffer(size_t n) const {
  PinnedBuffer buffer(n * sizeof(float), "a session's logits");
  return HostFloats(static_cast<float*>(buffer.release()), [](float* p) { cudaFreeHost(p); });
}

void CudaBackend::execute(const StepGraph& graph, const StepInputs& inputs) {
  const size_t n_rows = inputs.tokens.size();
  if (n_rows == 0 || n_rows > kMaxStepRows || inputs.output_rows.size() > kMaxStepRows) {
    throw InternalError("[cuda backend] execute: " + std::to_string(n_rows) + " rows");
  }
  Compiled& c = compile(graph);
  const TensorDesc& logits = graph.tensor(graph.logits);
  ensure_capacity(c);

  // Per-step values into the pinned staging buffer.
  const Staging host = Staging::at(staging_host_.get());
  std::vector<const CudaKvStorage*> storage(inputs.slots.size());
  for (size_t s = 0; s < inputs.slots.size(); ++s) {
    storage[s] = dynamic_cast<const CudaKvStorage*>(&inputs.slots[s]->storage());
    if (storage[s] == nullptr) throw InternalError("[cuda backend] execute: KV state of another backend");
  }
  for (size_t r = 0; r < n_rows; ++r) {
    const uint32_t s = inputs.row_slot[r];
    host.tokens[r] = inputs.tokens[r];
    host.positions[r] = inputs.positions[r];
    host.tables[r] = storage[s]->device_table();
    host.ring_rows[r] = static_cast<int32_t>(inputs.slots[s]->ring_rows());
    host.writes[r] = inputs.slot_writes[s] ? 1 : 0;
  }
  for (size_t i = 0; i < inputs.output_rows.size(); ++i) host.output_rows[i] = inputs.output_rows[i];
  const KvLayout& layout = inputs.slots.front()->layout();
  const uint32_t n_layer = static_cast<uint32_t>(layout.layers.size());
  std::vector<bool> ring_layer(n_layer);
  for (uint32_t il = 0; il < n_layer; ++il) ring_layer[il] = layout.layers[il].window != 0;

  cudaStream_t stream = as_stream(stream_);
  try {
    if (graph.shape.n_rows <= kMaxCapturedRows) {
      if (c.capture == nullptr) {
        check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        cudaGraph_t captured = nullptr;
        try {
          enqueue(graph, c, ring_layer, n_layer, nullptr);
        } catch (...) {
          cudaStreamEndCapture(stream, &captured);
          if (captured != nullptr) cudaGraphDestroy(captured);
          cudaGetLastError();
          throw;
        }
        check_cuda(cudaStreamEndCapture(stream, &captured), "cudaStreamEndCapture");
        c.capture = std::make_unique<StepCapture>(captured, fit_attention_grids_);
      }
      c.capture->fit_attention_grids(host.positions, n_rows);
      c.capture->launch(stream);
    } else {
      enqueue(graph, c, ring_layer, n_layer, host.positions);
    }
    // Each logits row straight into its destination, outside the captured
    // graph (the destinations change from step to step). A session's
    // buffers come from new_output_buffer, page-locked, so the copies queue
    // behind the step; into pageable memory a copy would still be correct,
    // only synchronous.
    const float* device_rows = act(c, graph.logits);
    for (size_t i = 0; i < inputs.outputs.size(); ++i) {
      check_cuda(cudaMemcpyAsync(inputs.outputs[i], device_rows + i * logits.cols, logits.cols * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream),
                 "copy logits");
    }
  } catch (...) {
    // Leave nothing queued behind a failed step: work already enqueued
    // finishes before the error reaches the caller (and before anything it
    // frees could be reused).
    cudaStreamSynchronize(stream);
    cudaGetLastError();
    throw;
  }
  check_cuda(cudaStreamSynchronize(stream), "step");

  // Embeddings: the final hidden states of the rows that asked, read after
  // the step (the stream is idle; embedding steps are prefills, never graph
  // replays on the decode path, so a plain synchronous copy is enough).
  if (graph.hidden != kNoTensor) {
    const size_t n_embd = graph.tensor(graph.hidden).cols;
    const float* hidden = act(c, graph.hidden);
    for (size_t r = 0; r < inputs.hidden.size(); ++r) {
      if (inputs.hidden[r] == nullptr) continue;
      check_cuda(cudaMemcpy(inputs.hidden[r], hidden + r * n_embd, n_embd * sizeof(float), cudaMemcpyDeviceToHost),
                 "copy hidden states");
    }
  }
}

}  // namespace cuda
}  // namespace muser
