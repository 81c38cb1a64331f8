#include "backend/metal/metal_backend.h"

#include <cstring>
#include <string>

#include "backend/cpu/ops_rope.h"
#include "backend/metal/kernel_args.h"
#include "backend/metal/metal_kv_storage.h"
#include "backend/metal/ops_encode.h"
#include "backend/registry.h"
#include "core/error.h"
#include "tensor/half_float.h"

namespace muser::metal {

namespace {

const BackendRegistration registration(
    // Above the CPU (10): "auto" takes Metal where a device exists.
    "metal", 20, [] { return MetalDevice::probe(); },
    [](const BackendContext&) -> std::unique_ptr<Backend> {
      return std::make_unique<MetalBackend>(std::shared_ptr<MetalDevice>(MetalDevice::open()));
    });

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

uint32_t u32(size_t n) {
  if (n > 0xffffffffu) throw InternalError("[metal backend] size " + std::to_string(n) + " exceeds 32 bits");
  return static_cast<uint32_t>(n);
}

std::vector<float> vector_as_floats(const WeightDesc& w) {
  const size_t n = static_cast<size_t>(w.ne[0]);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h = 0;
    switch (w.type) {
      case DType::F32: std::memcpy(&out[i], w.data + 4 * i, 4); break;
      case DType::F16: std::memcpy(&h, w.data + 2 * i, 2); out[i] = fp16_to_fp32(h); break;
      case DType::BF16: std::memcpy(&h, w.data + 2 * i, 2); out[i] = bf16_to_fp32(h); break;
      default: throw ModelFormatError("[metal backend] tensor '" + w.name + "' is not a float vector");
    }
  }
  return out;
}

// Consecutive rows of one sequence.
struct Segment {
  size_t slot, first, rows;
};

}  // namespace

// What a graph needs beyond its ops, computed once per graph id.
struct MetalPlan {
  struct Rope {
    double base, scale;
    size_t n_rot;
    TensorId divisors;
    cpu::RopeFrequencies frequencies;
  };
  uint64_t graph_id = 0;
  std::vector<size_t> tensor_offset;  // bytes into the arena (activations)
  size_t arena_bytes = 0;
  std::vector<Rope> ropes;
  std::vector<size_t> op_rope;    // per op: index into ropes (Rope ops)
  std::vector<size_t> windows;    // distinct attention windows
  std::vector<size_t> op_window;  // per op: index into windows (Attention ops)
};

MetalBackend::MetalBackend(std::shared_ptr<MetalDevice> device) : device_(std::move(device)) {
  if (!device_) throw InternalError("[metal backend] needs a device");
}

MetalBackend::~MetalBackend() {
  for (DeviceBuffer& b : weights_) device_->release_buffer(b);
  device_->release_buffer(arena_);
  device_->release_buffer(scratch_);
}

void MetalBackend::load_weights(const WeightTable& table) {
  table_ = &table;
  weights_.assign(table.size(), DeviceBuffer{});
  host_vectors_.assign(table.size(), {});
  for (uint32_t i = 0; i < table.size(); ++i) {
    const WeightDesc& w = table[i];
    if (w.n_dims == 1) {
      host_vectors_[i] = vector_as_floats(w);
      weights_[i] = device_->new_buffer(host_vectors_[i].size() * sizeof(float));
      std::memcpy(device_->contents(weights_[i]), host_vectors_[i].data(), host_vectors_[i].size() * sizeof(float));
      continue;
    }
    if (w.ne[0] % MUSER_METAL_CHUNK != 0) {
      throw ModelFormatError("[metal backend] tensor '" + w.name + "': rows of " + std::to_string(w.ne[0]) +
                             " values; the Metal kernels need a multiple of " +
                             std::to_string(MUSER_METAL_CHUNK));
    }
    matmul_kernel_name(w.type);  // throws for a type without kernels
    weights_[i] = device_->new_buffer(w.n_bytes);
    std::memcpy(device_->contents(weights_[i]), w.data, w.n_bytes);
  }
}

std::unique_ptr<KvStorage> MetalBackend::new_kv_storage(const KvLayout& layout) const {
  return std::make_unique<MetalKvStorage>(device_, layout);
}

void MetalBackend::reserve(DeviceBuffer& buffer, size_t bytes) {
  if (buffer.handle != nullptr && buffer.bytes >= bytes) return;
  DeviceBuffer bigger = device_->new_buffer(bytes);
  device_->release_buffer(buffer);
  buffer = bigger;
}

const MetalPlan& MetalBackend::plan_for(const StepGraph& graph) {
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    if ((*it)->graph_id == graph.id) {
      plans_.splice(plans_.begin(), plans_, it);
      return *plans_.front();
    }
  }
  auto plan = std::make_unique<MetalPlan>();
  plan->graph_id = graph.id;
  plan->tensor_offset.assign(graph.tensors.size(), 0);
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    const TensorDesc& d = graph.tensors[t];
    if (d.kind != TensorKind::Activation) continue;
    plan->tensor_offset[t] = plan->arena_bytes;
    plan->arena_bytes += align16(d.rows * d.cols * sizeof(float));
  }
  plan->op_rope.assign(graph.ops.size(), 0);
  plan->op_window.assign(graph.ops.size(), 0);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    if (op.kind == OpKind::Rope) {
      size_t k = 0;
      while (k < plan->ropes.size() &&
             !(plan->ropes[k].base == op.p.rope_base && plan->ropes[k].scale == op.p.rope_freq_scale &&
               plan->ropes[k].n_rot == op.p.n_rot && plan->ropes[k].divisors == op.src[2])) {
        ++k;
      }
      if (k == plan->ropes.size()) {
        const std::vector<float> none;
        const std::vector<float>& divisors =
            op.src[2] == kNoTensor ? none : host_vectors_[graph.tensor(op.src[2]).weight];
        plan->ropes.push_back(MetalPlan::Rope{op.p.rope_base, op.p.rope_freq_scale, op.p.n_rot, op.src[2],
                                              cpu::RopeFrequencies(op.p.rope_base, op.p.rope_freq_scale,
                                                                   op.p.n_rot, divisors)});
      }
      plan->op_rope[i] = k;
    } else if (op.kind == OpKind::Attention) {
      size_t k = 0;
      while (k < plan->windows.size() && plan->windows[k] != op.p.window) ++k;
      if (k == plan->windows.size()) plan->windows.push_back(op.p.window);
      plan->op_window[i] = k;
    }
  }
  plans_.push_front(std::move(plan));
  if (plans_.size() > kPlanCacheSize) plans_.pop_back();
  return *plans_.front();
}

void MetalBackend::execute(const StepGraph& graph, const StepInputs& inputs) {
  if (table_ == nullptr) throw InternalError("[metal backend] execute before load_weights");
  const MetalPlan& plan = plan_for(graph);
  const size_t n_rows = inputs.tokens.size();
  const size_t n_out = inputs.output_rows.size();

  std::vector<MetalKvStorage*> storage(inputs.slots.size(), nullptr);
  for (size_t s = 0; s < inputs.slots.size(); ++s) {
    storage[s] = dynamic_cast<MetalKvStorage*>(&inputs.slots[s]->storage());
    if (storage[s] == nullptr) throw InternalError("[metal backend] execute: KV state of another backend");
  }
  std::vector<Segment> segments;
  for (size_t r = 0; r < n_rows;) {
    size_t end = r;
    while (end < n_rows && inputs.row_slot[end] == inputs.row_slot[r]) ++end;
    segments.push_back(Segment{inputs.row_slot[r], r, end - r});
    r = end;
  }

  // Scratch: tokens, positions, output rows (int32), attention ranges per
  // window (uint32 pairs), RoPE cos/sin rows per setting (float32).
  const size_t tokens_at = 0;
  const size_t positions_at = align16(n_rows * 4);
  const size_t outputs_at = positions_at + align16(n_rows * 4);
  size_t at = outputs_at + align16(n_out * 4);
  std::vector<size_t> ranges_at(plan.windows.size());
  for (size_t w = 0; w < plan.windows.size(); ++w) {
    ranges_at[w] = at;
    at += align16(n_rows * 8);
  }
  std::vector<size_t> rope_at(plan.ropes.size());
  for (size_t k = 0; k < plan.ropes.size(); ++k) {
    rope_at[k] = at;
    at += align16(n_rows * plan.ropes[k].n_rot * 4);
  }
  reserve(scratch_, at);
  reserve(arena_, plan.arena_bytes);

  auto* scratch = static_cast<unsigned char*>(device_->contents(scratch_));
  std::memcpy(scratch + tokens_at, inputs.tokens.data(), n_rows * 4);
  std::memcpy(scratch + positions_at, inputs.positions.data(), n_rows * 4);
  std::memcpy(scratch + outputs_at, inputs.output_rows.data(), n_out * 4);
  for (size_t w = 0; w < plan.windows.size(); ++w) {
    auto* ranges = reinterpret_cast<uint32_t*>(scratch + ranges_at[w]);
    for (size_t r = 0; r < n_rows; ++r) {
      const size_t pos = static_cast<size_t>(inputs.positions[r]);
      const size_t window = plan.windows[w];
      ranges[2 * r] = u32(window > 0 && pos + 1 > window ? pos + 1 - window : 0);
      ranges[2 * r + 1] = u32(pos);
    }
  }
  for (size_t k = 0; k < plan.ropes.size(); ++k) {
    const size_t half = plan.ropes[k].n_rot / 2;
    auto* table = reinterpret_cast<float*>(scratch + rope_at[k]);
    for (size_t r = 0; r < n_rows; ++r) {
      plan.ropes[k].frequencies.angles(static_cast<size_t>(inputs.positions[r]), table + 2 * half * r,
                                       table + 2 * half * r + half);
    }
  }

  auto act = [&](TensorId t, size_t row = 0) {
    return BufferSlice{arena_, plan.tensor_offset[t] + row * graph.tensor(t).cols * sizeof(float)};
  };
  auto cols = [&](TensorId t) { return u32(graph.tensor(t).cols); };
  auto rows = [&](TensorId t) { return u32(graph.tensor(t).rows); };
  auto ids = [&](TensorId t) {
    switch (graph.tensor(t).role) {
      case InputRole::Tokens: return BufferSlice{scratch_, tokens_at};
      case InputRole::Positions: return BufferSlice{scratch_, positions_at};
      case InputRole::OutputRows: return BufferSlice{scratch_, outputs_at};
    }
    throw InternalError("[metal backend] unknown input role");
  };
  auto weight = [&](TensorId t) { return BufferSlice{weights_[graph.tensor(t).weight], 0}; };
  auto is_weight = [&](TensorId t) { return graph.tensor(t).kind == TensorKind::Weight; };

  std::unique_ptr<CommandBatch> batch = device_->begin_batch();
  KernelEncoder& enc = batch->encoder();
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    const OpParams& p = op.p;
    // A step that only wants hidden states has no logits rows: the ops that
    // produce them have nothing to do (Metal rejects empty grids).
    if (op.dst != kNoTensor && graph.tensor(op.dst).rows == 0) continue;
    switch (op.kind) {
      case OpKind::GetRows: {
        if (is_weight(op.src[0])) {
          const WeightDesc& w = (*table_)[graph.tensor(op.src[0]).weight];
          encode_get_rows(enc, w.type, weight(op.src[0]), u32(w.ne[0]), u32(w.ne[1]), ids(op.src[1]), rows(op.dst),
                          act(op.dst), cols(op.dst));
        } else {
          encode_get_rows(enc, DType::F32, act(op.src[0]), cols(op.src[0]), rows(op.src[0]), ids(op.src[1]),
                          rows(op.dst), act(op.dst), cols(op.dst));
        }
        break;
      }
      case OpKind::MatMul: {
        const WeightDesc& w = (*table_)[graph.tensor(op.src[0]).weight];
        encode_matmul(enc, w.type, weight(op.src[0]), u32(w.ne[0]), u32(w.ne[1]), act(op.src[1]), cols(op.src[1]),
                      rows(op.dst), act(op.dst), cols(op.dst));
        break;
      }
      case OpKind::RmsNorm: {
        const uint32_t n = cols(op.src[0]);
        const uint32_t group = p.group != 0 ? u32(p.group) : n;
        const BufferSlice w = op.src[1] != kNoTensor ? weight(op.src[1]) : BufferSlice{};
        encode_rms_norm(enc, act(op.src[0]), n, w, group, n / group, rows(op.dst), p.eps, act(op.dst), cols(op.dst));
        break;
      }
      case OpKind::Add: {
        const bool bias = is_weight(op.src[1]);
        encode_add(enc, act(op.src[0]), cols(op.src[0]), bias ? weight(op.src[1]) : act(op.src[1]),
                   bias ? 0 : cols(op.src[1]), cols(op.dst), rows(op.dst), act(op.dst), cols(op.dst));
        break;
      }
      case OpKind::Scale:
        encode_scale(enc, act(op.src[0]), cols(op.src[0]), p.scalar, cols(op.dst), rows(op.dst), act(op.dst),
                     cols(op.dst));
        break;
      case OpKind::Softcap:
        encode_softcap(enc, act(op.src[0]), cols(op.src[0]), p.scalar, cols(op.dst), rows(op.dst), act(op.dst),
                       cols(op.dst));
        break;
      case OpKind::Glu:
        encode_glu(enc, p.glu == muser::GluKind::Silu ? GluKind::SwiGlu : GluKind::GeGlu, act(op.src[0]),
                   cols(op.src[0]), act(op.src[1]), cols(op.src[1]), cols(op.dst), rows(op.dst), act(op.dst),
                   cols(op.dst));
        break;
      case OpKind::SliceCols: {
        BufferSlice from = act(op.src[0]);
        from.offset += p.offset * sizeof(float);
        encode_copy(enc, from, cols(op.src[0]), cols(op.dst), rows(op.dst), act(op.dst), cols(op.dst));
        break;
      }
      case OpKind::Rope: {
        // The kernel rotates in place; an out-of-place Rope copies first.
        if (op.dst != op.src[0]) {
          encode_copy(enc, act(op.src[0]), cols(op.src[0]), cols(op.dst), rows(op.dst), act(op.dst), cols(op.dst));
        }
        encode_rope(enc, act(op.dst), cols(op.dst), rows(op.dst), u32(p.n_head), u32(p.head_dim_k), u32(p.n_rot),
                    p.rope_style == RopeStyle::Neox, BufferSlice{scratch_, rope_at[plan.op_rope[i]]});
        break;
      }
      case OpKind::KvStore: {
        for (const Segment& seg : segments) {
          if (!inputs.slot_writes[seg.slot]) continue;
          const KvState& state = *inputs.slots[seg.slot];
          const uint32_t ring = state.layout().layers[p.layer].window != 0 ? u32(state.ring_rows()) : 0;
          const MetalKvStorage::Planes& planes = storage[seg.slot]->planes(p.layer);
          const uint32_t start = u32(static_cast<size_t>(inputs.positions[seg.first]));
          encode_kv_store(enc, act(op.src[0], seg.first), cols(op.src[0]), u32(seg.rows), cols(op.src[0]), start,
                          ring, BufferSlice{planes.k, 0}, u32(planes.rows));
          encode_kv_store(enc, act(op.src[1], seg.first), cols(op.src[1]), u32(seg.rows), cols(op.src[1]), start,
                          ring, BufferSlice{planes.v, 0}, u32(planes.rows));
        }
        break;
      }
      case OpKind::Attention: {
        for (const Segment& seg : segments) {
          const KvState& state = *inputs.slots[seg.slot];
          const MetalKvStorage::Planes& planes = storage[seg.slot]->planes(p.layer);
          AttentionShape shape;
          shape.n_head = u32(p.n_head);
          shape.n_head_kv = u32(p.n_head_kv);
          shape.head_dim_k = u32(p.head_dim_k);
          shape.head_dim_v = u32(p.head_dim_v);
          shape.plane_rows = u32(planes.rows);
          shape.ring_rows = state.layout().layers[p.layer].window != 0 ? u32(state.ring_rows()) : 0;
          shape.scale = p.scalar;
          const BufferSlice ranges{scratch_, ranges_at[plan.op_window[i]] + seg.first * 8};
          encode_attention(enc, shape, act(op.src[0], seg.first), cols(op.src[0]), u32(seg.rows),
                           BufferSlice{planes.k, 0}, BufferSlice{planes.v, 0}, ranges, act(op.dst, seg.first),
                           cols(op.dst));
        }
        break;
      }
    }
  }
  batch->commit_and_wait();

  const auto* arena = static_cast<const unsigned char*>(device_->contents(arena_));
  const size_t vocab = graph.tensor(graph.logits).cols;
  for (size_t i = 0; i < n_out; ++i) {
    std::memcpy(inputs.outputs[i], arena + plan.tensor_offset[graph.logits] + i * vocab * sizeof(float),
                vocab * sizeof(float));
  }
  // Final hidden states (embeddings), for the rows that want them.
  if (graph.hidden != kNoTensor) {
    const size_t n_embd = graph.tensor(graph.hidden).cols;
    for (size_t r = 0; r < inputs.hidden.size(); ++r) {
      if (inputs.hidden[r] == nullptr) continue;
      std::memcpy(inputs.hidden[r], arena + plan.tensor_offset[graph.hidden] + r * n_embd * sizeof(float),
                  n_embd * sizeof(float));
    }
  }
}

}  // namespace muser::metal
