#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "backend/accelerators.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_kv_state.h"
#include "backend/segment_checks.h"
#include "core/error.h"
#include "tensor/half_float.h"

namespace muser {

std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Model> model) {
  const BackendAvailability a = cuda_availability();
  if (!a.usable) throw InvalidArgument("[engine] backend 'cuda' is not available: " + a.reason);
  return std::make_unique<cuda::CudaBackend>(std::move(model));
}

namespace cuda {
namespace {

size_t align256(size_t n) { return (n + 255) & ~static_cast<size_t>(255); }

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// A norm weight or bias as float32 (ModelWeights checked type and shape).
std::vector<float> to_floats(const TensorInfo* t) {
  std::vector<float> out;
  if (t == nullptr) return out;
  const size_t n = static_cast<size_t>(t->n_elements());
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    switch (t->type) {
      case DType::F32: std::memcpy(&out[i], t->data + 4 * i, 4); break;
      case DType::F16: std::memcpy(&h, t->data + 2 * i, 2); out[i] = fp16_to_fp32(h); break;
      case DType::BF16: std::memcpy(&h, t->data + 2 * i, 2); out[i] = bf16_to_fp32(h); break;
      default: throw InternalError("[cuda backend] tensor '" + std::string(t->name) + "' is not a float vector");
    }
  }
  return out;
}

KvGeometry geometry_of(const Model& model) {
  const HParams& hp = model.hparams;
  KvGeometry g;
  g.n_layer = hp.n_layer;
  g.k_width = hp.k_width();
  g.v_width = hp.v_width();
  g.window = hp.has_sliding_layers() ? hp.sliding_window : 0;
  g.ring.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) g.ring[il] = hp.layers[il].sliding;
  g.model_name = hp.arch_name;
  return g;
}

}  // namespace

// Per-row inputs, one array of `capacity` entries each, in this order in
// both the pinned staging buffer and its device copy.
struct CudaBackend::RowInputs {
  static size_t bytes(size_t capacity) { return capacity * (sizeof(void*) + 5 * sizeof(int32_t)); }
  struct View {
    const uint16_t* const** tables;
    int32_t *tokens, *positions, *ring_rows, *writes, *logit_rows;
  };
  static View at(void* base, size_t capacity) {
    View v;
    uint8_t* p = static_cast<uint8_t*>(base);
    v.tables = reinterpret_cast<const uint16_t* const**>(p);
    int32_t* ints = reinterpret_cast<int32_t*>(p + capacity * sizeof(void*));
    v.tokens = ints;
    v.positions = ints + capacity;
    v.ring_rows = ints + 2 * capacity;
    v.writes = ints + 3 * capacity;
    v.logit_rows = ints + 4 * capacity;
    return v;
  }
};

CudaBackend::CudaBackend(std::shared_ptr<const Model> model) : model_(std::move(model)) {
  if (!model_) throw InternalError("[cuda backend] needs a model");
  const HParams& hp = model_->hparams;
  if (hp.head_dim_k > 256 || hp.head_dim_v > 256 || hp.head_dim_k % 2 != 0) {
    throw ModelFormatError("[cuda backend] head dimensions " + std::to_string(hp.head_dim_k) + "/" +
                           std::to_string(hp.head_dim_v) + ": expected even and at most 256");
  }
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = stream;
  try {
    upload_weights();
    ensure_workspace(4, 4);
  } catch (...) {
    cudaStreamDestroy(stream);
    throw;
  }
}

CudaBackend::~CudaBackend() {
  drop_graphs();
  if (stream_ != nullptr) {
    cudaStreamSynchronize(as_stream(stream_));
    cudaStreamDestroy(as_stream(stream_));
  }
}

void CudaBackend::drop_graphs() noexcept {
  for (void*& g : graphs_) {
    if (g != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
    g = nullptr;
  }
}

void CudaBackend::upload_weights() {
  const HParams& hp = model_->hparams;
  const ModelWeights& w = model_->weights;
  // Layout pass: every distinct matrix once (a tied output shares the
  // embedding's bytes), then the float vectors, each 256-byte aligned.
  std::map<const TensorInfo*, size_t> matrix_offset;
  std::vector<std::pair<size_t, std::vector<float>>> vectors;
  size_t total = 0;
  auto place_matrix = [&](const TensorInfo* t) {
    if (t == nullptr || matrix_offset.count(t) != 0) return;
    if (t->ne[0] % 32 != 0) {
      throw ModelFormatError("[cuda backend] tensor '" + std::string(t->name) + "' has rows of " +
                             std::to_string(t->ne[0]) + " elements: expected a multiple of 32");
    }
    matrix_offset[t] = total;
    total += align256(t->n_bytes);
  };
  place_matrix(w.token_embd);
  place_matrix(w.output);
  for (const LayerWeights& lw : w.layers) {
    for (const TensorInfo* t : {lw.attn_q, lw.attn_k, lw.attn_v, lw.attn_output, lw.ffn_gate, lw.ffn_up, lw.ffn_down}) {
      place_matrix(t);
    }
  }
  std::vector<size_t> vector_offsets;
  auto place_vector = [&](const TensorInfo* t) -> size_t {
    if (t == nullptr) return SIZE_MAX;
    vectors.emplace_back(total, to_floats(t));
    total += align256(vectors.back().second.size() * sizeof(float));
    return vectors.size() - 1;
  };
  struct LayerVectorIds {
    size_t attn_norm, ffn_norm, post_attn_norm, post_ffn_norm, q_norm, k_norm, q_bias, k_bias, v_bias;
  };
  std::vector<LayerVectorIds> ids(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& lw = w.layers[il];
    ids[il] = {place_vector(lw.attn_norm), place_vector(lw.ffn_norm), place_vector(lw.post_attn_norm),
               place_vector(lw.post_ffn_norm), place_vector(lw.attn_q_norm), place_vector(lw.attn_k_norm),
               place_vector(lw.attn_q_bias), place_vector(lw.attn_k_bias), place_vector(lw.attn_v_bias)};
  }
  const size_t output_norm_id = place_vector(w.output_norm);

  weights_ = DeviceBuffer(total, "weights of model '" + hp.arch_name + "' (" + model_->file->path() + ")");
  uint8_t* base = weights_.as<uint8_t>();
  for (const auto& [t, offset] : matrix_offset) {
    check_cuda(cudaMemcpy(base + offset, t->data, t->n_bytes, cudaMemcpyHostToDevice), "upload weights");
  }
  for (const auto& [offset, values] : vectors) {
    check_cuda(cudaMemcpy(base + offset, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice),
               "upload weights");
  }
  auto matrix = [&](const TensorInfo* t) {
    Matrix m;
    m.type = t->type;
    m.data = base + matrix_offset.at(t);
    m.k = t->ne[0];
    m.n_out = t->ne[1];
    return m;
  };
  auto vec = [&](size_t id) -> const float* {
    return id == SIZE_MAX ? nullptr : reinterpret_cast<const float*>(base + vectors[id].first);
  };
  token_embd_ = matrix(w.token_embd);
  output_ = matrix(w.output);
  output_norm_ = vec(output_norm_id);

  // RoPE frequency tables: one per distinct (base, scale), as the CPU builds them.
  const std::vector<float> divisors = to_floats(w.rope_freqs);
  std::vector<std::pair<double, double>> kinds;
  std::vector<double> freqs;
  const size_t n_pairs = hp.n_rot / 2;
  layers_.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& lw = w.layers[il];
    LayerDevice& ld = layers_[il];
    ld.q = matrix(lw.attn_q);
    ld.k = matrix(lw.attn_k);
    ld.v = matrix(lw.attn_v);
    ld.o = matrix(lw.attn_output);
    ld.gate = matrix(lw.ffn_gate);
    ld.up = matrix(lw.ffn_up);
    ld.down = matrix(lw.ffn_down);
    ld.attn_norm = vec(ids[il].attn_norm);
    ld.ffn_norm = vec(ids[il].ffn_norm);
    ld.post_attn_norm = vec(ids[il].post_attn_norm);
    ld.post_ffn_norm = vec(ids[il].post_ffn_norm);
    ld.q_norm = vec(ids[il].q_norm);
    ld.k_norm = vec(ids[il].k_norm);
    ld.q_bias = vec(ids[il].q_bias);
    ld.k_bias = vec(ids[il].k_bias);
    ld.v_bias = vec(ids[il].v_bias);
    const LayerAttention& la = hp.layers[il];
    const std::pair<double, double> key{la.rope_base, la.rope_freq_scale};
    auto found = std::find(kinds.begin(), kinds.end(), key);
    if (found == kinds.end()) {
      kinds.push_back(key);
      for (size_t i = 0; i < n_pairs; ++i) {
        double f = std::pow(la.rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(hp.n_rot));
        if (!divisors.empty()) f /= static_cast<double>(divisors[i]);
        freqs.push_back(f);
      }
      found = kinds.end() - 1;
    }
    ld.rope_kind = static_cast<size_t>(found - kinds.begin());
    ld.rope_scale = la.rope_freq_scale;
  }
  n_rope_kinds_ = kinds.size();
  rope_freqs_ = DeviceBuffer(std::max<size_t>(freqs.size(), 1) * sizeof(double), "RoPE frequencies");
  if (!freqs.empty()) {
    check_cuda(cudaMemcpy(rope_freqs_.get(), freqs.data(), freqs.size() * sizeof(double), cudaMemcpyHostToDevice),
               "upload RoPE frequencies");
  }
}

void CudaBackend::ensure_workspace(size_t n_rows, size_t n_logits) {
  if (n_rows <= rows_capacity_ && n_logits <= logits_capacity_) return;
  // Captured graphs hold the old buffers' addresses.
  drop_graphs();
  const HParams& hp = model_->hparams;
  const size_t rows = std::max(n_rows, rows_capacity_);
  const size_t logits = std::max(n_logits, logits_capacity_);
  const std::string what = "workspace of model '" + hp.arch_name + "' for " + std::to_string(rows) + " rows";
  auto floats = [&](size_t per_row) { return DeviceBuffer(rows * per_row * sizeof(float), what); };
  ws_x_ = floats(hp.n_embd);
  ws_xn_ = floats(hp.n_embd);
  ws_proj_ = floats(hp.n_embd);
  ws_q_ = floats(hp.q_width());
  ws_k_ = floats(hp.k_width());
  ws_v_ = floats(hp.v_width());
  ws_attn_ = floats(hp.attn_out_width());
  ws_gate_ = floats(hp.n_ff);
  ws_up_ = floats(hp.n_ff);
  ws_out_rows_ = DeviceBuffer(logits * hp.n_embd * sizeof(float), what);
  ws_logits_ = DeviceBuffer(logits * hp.n_vocab * sizeof(float), what);
  logits_host_ = PinnedBuffer(logits * hp.n_vocab * sizeof(float), what);
  const size_t widest = std::max<size_t>({hp.n_embd, hp.attn_out_width(), hp.n_ff});
  for (uint32_t f = 0; f < 4; ++f) {
    ws_act_[f] = DeviceBuffer(activation_bytes(static_cast<ActivationFormat>(f), rows, widest), what);
  }
  meta_dev_ = DeviceBuffer(RowInputs::bytes(rows), what);
  meta_host_ = PinnedBuffer(RowInputs::bytes(rows), what);
  rows_capacity_ = rows;
  logits_capacity_ = logits;
}

const ActivationView& CudaBackend::activations(const Matrix& m, const float* x, size_t n_rows) {
  const ActivationFormat format = activation_format(m.type);
  ActMemo& memo = act_memo_[static_cast<uint32_t>(format)];
  if (memo.source != x || memo.n_rows != n_rows || memo.k != m.k) {
    memo.view = quantize_activations(format, x, n_rows, m.k, ws_act_[static_cast<uint32_t>(format)].get(), stream_);
    memo.source = x;
    memo.n_rows = n_rows;
    memo.k = m.k;
  }
  return memo.view;
}

void CudaBackend::run_matrix(const Matrix& m, const float* x, size_t n_rows, float* y) {
  matvec(m.type, m.data, m.n_out, activations(m, x, n_rows), n_rows, y, m.n_out, stream_);
}

void CudaBackend::sync() { check_cuda(cudaStreamSynchronize(as_stream(stream_)), "forward"); }

void CudaBackend::enqueue_forward(size_t n_rows, size_t n_logits, int64_t fail_after_layer) {
  const HParams& hp = model_->hparams;
  const auto meta = RowInputs::at(meta_dev_.get(), rows_capacity_);
  KvRows kv;
  kv.tables = meta.tables;
  kv.positions = meta.positions;
  kv.ring_rows = meta.ring_rows;
  kv.writes = meta.writes;
  float* x = ws_x_.as<float>();
  float* xn = ws_xn_.as<float>();
  float* proj = ws_proj_.as<float>();
  float* q = ws_q_.as<float>();
  float* k = ws_k_.as<float>();
  float* v = ws_v_.as<float>();
  float* attn = ws_attn_.as<float>();
  float* gate = ws_gate_.as<float>();
  float* up = ws_up_.as<float>();
  const size_t n_embd = hp.n_embd;
  const size_t n_pairs = hp.n_rot / 2;
  const bool neox = hp.rope_style == RopeStyle::Neox;
  auto forget_activations = [&] {
    for (ActMemo& m : act_memo_) m.source = nullptr;
  };

  get_rows(token_embd_.type, token_embd_.data, n_embd, meta.tokens, n_rows, x, stream_);
  if (hp.embd_scale != 1.0f) scale(x, n_rows * n_embd, hp.embd_scale, stream_);

  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const LayerDevice& L = layers_[il];
    const LayerAttention& la = hp.layers[il];
    // --- attention block
    rms_norm(x, L.attn_norm, n_rows, n_embd, hp.rms_eps, xn, stream_);
    forget_activations();
    run_matrix(L.q, xn, n_rows, q);
    run_matrix(L.k, xn, n_rows, k);
    run_matrix(L.v, xn, n_rows, v);
    if (hp.qkv_bias) {
      add(q, L.q_bias, n_rows, hp.q_width(), 0, stream_);
      add(k, L.k_bias, n_rows, hp.k_width(), 0, stream_);
      add(v, L.v_bias, n_rows, hp.v_width(), 0, stream_);
    }
    if (hp.qk_norm) {
      rms_norm(q, L.q_norm, n_rows * hp.n_head, hp.head_dim_k, hp.rms_eps, q, stream_);
      rms_norm(k, L.k_norm, n_rows * hp.n_head_kv, hp.head_dim_k, hp.rms_eps, k, stream_);
    }
    const double* freqs = rope_freqs_.as<double>() + L.rope_kind * n_pairs;
    rope(q, n_rows, hp.n_head, hp.head_dim_k, hp.n_rot, neox, meta.positions, freqs, L.rope_scale, stream_);
    rope(k, n_rows, hp.n_head_kv, hp.head_dim_k, hp.n_rot, neox, meta.positions, freqs, L.rope_scale, stream_);
    // Keys and values go through the f16 planes before anyone reads them, so
    // a row attends to exactly the bits a later decode will see.
    write_kv(kv, hp.n_layer, il, la.sliding, k, hp.k_width(), v, hp.v_width(), n_rows, stream_);
    AttentionShape shape;
    shape.n_layer = hp.n_layer;
    shape.layer = il;
    shape.ring = la.sliding;
    shape.n_head = hp.n_head;
    shape.n_head_kv = hp.n_head_kv;
    shape.head_dim_k = hp.head_dim_k;
    shape.head_dim_v = hp.head_dim_v;
    shape.window = la.sliding ? hp.sliding_window : 0;
    shape.scale = hp.attn_scale;
    attention(kv, shape, q, n_rows, attn, stream_);
    forget_activations();
    run_matrix(L.o, attn, n_rows, proj);
    if (hp.post_norms) rms_norm(proj, L.post_attn_norm, n_rows, n_embd, hp.rms_eps, proj, stream_);
    add(x, proj, n_rows, n_embd, n_embd, stream_);
    // --- feed-forward block
    rms_norm(x, L.ffn_norm, n_rows, n_embd, hp.rms_eps, xn, stream_);
    forget_activations();
    run_matrix(L.gate, xn, n_rows, gate);
    run_matrix(L.up, xn, n_rows, up);
    glu(hp.ffn_activation == FfnActivation::Silu ? Glu::Silu : Glu::GeluTanh, gate, up, n_rows * hp.n_ff, stream_);
    forget_activations();
    run_matrix(L.down, gate, n_rows, proj);
    if (hp.post_norms) rms_norm(proj, L.post_ffn_norm, n_rows, n_embd, hp.rms_eps, proj, stream_);
    add(x, proj, n_rows, n_embd, n_embd, stream_);
    if (static_cast<int64_t>(il) == fail_after_layer) {
      sync();  // the layers so far really wrote their KV
      throw InternalError("[cuda backend] injected fault after layer " + std::to_string(il) + " (test hook)");
    }
  }

  if (n_logits > 0) {
    float* out_rows = ws_out_rows_.as<float>();
    gather_rows(x, n_embd, meta.logit_rows, n_logits, out_rows, stream_);
    rms_norm(out_rows, output_norm_, n_logits, n_embd, hp.rms_eps, out_rows, stream_);
    forget_activations();
    run_matrix(output_, out_rows, n_logits, ws_logits_.as<float>());
    if (hp.final_logit_softcap > 0.0f) {
      softcap(ws_logits_.as<float>(), n_logits * hp.n_vocab, hp.final_logit_softcap, stream_);
    }
    check_cuda(cudaMemcpyAsync(logits_host_.get(), ws_logits_.get(), n_logits * hp.n_vocab * sizeof(float),
                               cudaMemcpyDeviceToHost, as_stream(stream_)),
               "copy logits");
  }
}

std::unique_ptr<KvState> CudaBackend::new_kv_state(size_t max_context) const {
  return std::make_unique<CudaKvState>(geometry_of(*model_), max_context);
}

void CudaBackend::forward(const std::vector<ForwardSegment>& segments) {
  const HParams& hp = model_->hparams;
  check_segments(segments, hp.n_vocab, "cuda backend");
  std::vector<CudaKvState*> states(segments.size());
  for (size_t s = 0; s < segments.size(); ++s) {
    states[s] = dynamic_cast<CudaKvState*>(segments[s].kv);
    if (states[s] == nullptr) throw InternalError("[cuda backend] forward: KV state of another backend");
  }
  const size_t n_rows = total_rows(segments);
  size_t n_logits = 0;
  bool decode_group = n_rows <= 4;
  for (const ForwardSegment& seg : segments) {
    if (seg.logits != nullptr) ++n_logits;
    decode_group = decode_group && seg.n_tokens == 1 && !seg.replay && seg.logits != nullptr;
  }

  // Everything that allocates happens before the first KV write.
  ensure_workspace(n_rows, std::max<size_t>(n_logits, 1));
  const auto meta = RowInputs::at(meta_host_.get(), rows_capacity_);
  size_t r = 0, out = 0;
  std::vector<size_t> logit_segments;
  for (size_t s = 0; s < segments.size(); ++s) {
    const ForwardSegment& seg = segments[s];
    for (size_t i = 0; i < seg.n_tokens; ++i, ++r) {
      meta.tables[r] = states[s]->device_table();
      meta.tokens[r] = seg.tokens[i];
      meta.positions[r] = static_cast<int32_t>(seg.start + i);
      meta.ring_rows[r] = static_cast<int32_t>(states[s]->ring_rows());
      meta.writes[r] = seg.replay ? 0 : 1;
    }
    if (seg.logits != nullptr) {
      meta.logit_rows[out++] = static_cast<int32_t>(r - 1);
      logit_segments.push_back(s);
    }
  }
  for (size_t s = 0; s < segments.size(); ++s) {
    if (!segments[s].replay) states[s]->begin_write(segments[s].start, segments[s].n_tokens);
  }

  const int64_t fail_after_layer = faults.start_forward();
  cudaStream_t stream = as_stream(stream_);
  auto copy_inputs = [&] {
    check_cuda(cudaMemcpyAsync(meta_dev_.get(), meta_host_.get(), RowInputs::bytes(rows_capacity_),
                               cudaMemcpyHostToDevice, stream),
               "copy row inputs");
  };
  if (decode_group && fail_after_layer < 0) {
    void*& exec = graphs_[n_rows - 1];
    if (exec == nullptr) {
      check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      cudaGraph_t graph = nullptr;
      try {
        copy_inputs();
        enqueue_forward(n_rows, n_logits, -1);
      } catch (...) {
        cudaStreamEndCapture(stream, &graph);
        if (graph != nullptr) cudaGraphDestroy(graph);
        cudaGetLastError();
        throw;
      }
      check_cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
      cudaGraphExec_t instance = nullptr;
      const cudaError_t err = cudaGraphInstantiate(&instance, graph, 0);
      cudaGraphDestroy(graph);
      check_cuda(err, "cudaGraphInstantiate");
      exec = instance;
    }
    check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), stream), "cudaGraphLaunch");
  } else {
    copy_inputs();
    enqueue_forward(n_rows, n_logits, fail_after_layer);
  }
  sync();

  const float* logits = logits_host_.as<float>();
  for (size_t i = 0; i < logit_segments.size(); ++i) {
    std::memcpy(segments[logit_segments[i]].logits, logits + i * hp.n_vocab, hp.n_vocab * sizeof(float));
  }
  for (size_t s = 0; s < segments.size(); ++s) {
    if (!segments[s].replay) states[s]->end_write(segments[s].start, segments[s].n_tokens);
  }
}

}  // namespace cuda
}  // namespace muser
