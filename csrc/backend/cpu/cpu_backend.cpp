#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops_activation.h"
#include "backend/cpu/ops_attention.h"
#include "backend/cpu/ops_norm.h"
#include "backend/segment_checks.h"
#include "core/error.h"
#include "model/kv_cache.h"
#include "tensor/half_float.h"

namespace muser {
namespace {

// Rows per task for the per-row ops; below this many rows they run inline
// (waking the pool costs more than the work).
constexpr size_t kRowsPerTask = 8;
// Consecutive rows of a segment whose attention one task computes together.
constexpr size_t kAttentionBlockRows = 4;
// Query heads per KV head the attention blocks are sized for.
constexpr size_t kMaxGroupHeads = 64;
// Output projections up to this size are repacked (see the constructor).
constexpr uint64_t kMaxPackedOutputBytes = uint64_t{64} << 20;

// A norm weight or bias as float32 (ModelWeights checked its type and shape).
std::vector<float> to_floats(const TensorInfo* t) {
  std::vector<float> out;
  if (t == nullptr) return out;
  const size_t n = static_cast<size_t>(t->n_elements());
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    switch (t->type) {
      case DType::F32: std::memcpy(&out[i], t->data + 4 * i, 4); break;
      case DType::F16: {
        uint16_t h;
        std::memcpy(&h, t->data + 2 * i, 2);
        out[i] = fp16_to_fp32(h);
        break;
      }
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, t->data + 2 * i, 2);
        out[i] = bf16_to_fp32(h);
        break;
      }
      default:
        throw InternalError("[cpu backend] tensor '" + std::string(t->name) + "' is not a float vector");
    }
  }
  return out;
}

void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

CpuBackend::CpuBackend(std::shared_ptr<const Model> model, std::shared_ptr<ThreadPool> pool)
    : model_(std::move(model)),
      pool_(std::move(pool)),
      f16_(cpu::f16_vec_ops()),
      activations_(cpu::activation_ops()) {
  if (!model_ || !pool_) throw InternalError("[cpu backend] needs a model and a thread pool");
  const HParams& hp = model_->hparams;
  const ModelWeights& w = model_->weights;
  if (hp.n_head / hp.n_head_kv > kMaxGroupHeads) {
    throw ModelFormatError("[cpu backend] " + std::to_string(hp.n_head / hp.n_head_kv) +
                           " query heads per KV head: expected at most " + std::to_string(kMaxGroupHeads));
  }
  const std::vector<float> rope_divisors = to_floats(w.rope_freqs);
  layer_vectors_.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& lw = w.layers[il];
    LayerVectors& lv = layer_vectors_[il];
    lv.attn_norm = to_floats(lw.attn_norm);
    lv.ffn_norm = to_floats(lw.ffn_norm);
    lv.post_attn_norm = to_floats(lw.post_attn_norm);
    lv.post_ffn_norm = to_floats(lw.post_ffn_norm);
    lv.q_norm = to_floats(lw.attn_q_norm);
    lv.k_norm = to_floats(lw.attn_k_norm);
    lv.q_bias = to_floats(lw.attn_q_bias);
    lv.k_bias = to_floats(lw.attn_k_bias);
    lv.v_bias = to_floats(lw.attn_v_bias);
    // Layers that rotate alike share one table of angles per forward.
    const LayerAttention& la = hp.layers[il];
    auto same = std::find_if(rope_.begin(), rope_.end(), [&](const cpu::RopeFrequencies& f) {
      return f.same_as(la.rope_base, la.rope_freq_scale);
    });
    if (same == rope_.end()) {
      rope_.emplace_back(la.rope_base, la.rope_freq_scale, hp.n_rot, rope_divisors);
      same = rope_.end() - 1;
    }
    lv.rope_kind = static_cast<size_t>(same - rope_.begin());
  }
  output_norm_ = to_floats(w.output_norm);
  // Interleaved copies of the matmul weights whose best kernels want them
  // (packed_weights.h), made once here; the rest stay zero-copy views. The
  // output projection only meets the few rows that need logits, so a large
  // one streams from memory at the same speed in either layout: packing it
  // would only cost load time and memory (gemma3's 262k-token vocabulary is
  // 180 MB of Q8_0).
  std::vector<const TensorInfo*> projections;
  if (w.output->n_bytes <= kMaxPackedOutputBytes) projections.push_back(w.output);
  for (const LayerWeights& lw : w.layers) {
    projections.insert(projections.end(), {lw.attn_q, lw.attn_k, lw.attn_v, lw.attn_output,
                                           lw.ffn_gate, lw.ffn_up, lw.ffn_down});
  }
  packed_ = cpu::PackedWeights(projections, cpu::kernel_set(cpu::best_isa()), *pool_,
                               cpu::SourcePages::ReleaseMapped);
}

CpuBackend::~CpuBackend() = default;

std::unique_ptr<KvState> CpuBackend::new_kv_state(size_t max_context) const {
  return std::make_unique<KvCache>(model_->hparams, max_context);
}

template <typename Fn>
void CpuBackend::for_row_chunks(size_t n_rows, const Fn& fn) {
  if (n_rows <= kRowsPerTask || pool_->size() == 1) {
    fn(size_t{0}, n_rows);
    return;
  }
  const size_t n_tasks = (n_rows + kRowsPerTask - 1) / kRowsPerTask;
  pool_->parallel_for(n_tasks, [&](size_t task, int) {
    const size_t first = task * kRowsPerTask;
    fn(first, std::min(n_rows, first + kRowsPerTask));
  });
}

void CpuBackend::forward(const std::vector<ForwardSegment>& segments) {
  const HParams& hp = model_->hparams;
  check_segments(segments, hp.n_vocab, "cpu backend");
  std::vector<KvCache*> caches(segments.size());
  for (size_t s = 0; s < segments.size(); ++s) {
    caches[s] = dynamic_cast<KvCache*>(segments[s].kv);
    if (caches[s] == nullptr) throw InternalError("[cpu backend] forward: KV state of another backend");
  }
  const size_t n_rows = total_rows(segments);

  // Everything that allocates happens before the first KV write.
  rows_.clear();
  tokens_.clear();
  size_t longest_span = 1;
  for (size_t s = 0; s < segments.size(); ++s) {
    const ForwardSegment& seg = segments[s];
    for (size_t i = 0; i < seg.n_tokens; ++i) {
      rows_.push_back(Row{s, seg.start + i});
      tokens_.push_back(seg.tokens[i]);
    }
    longest_span = std::max(longest_span, seg.start + seg.n_tokens);
  }
  grow(ws_.x, n_rows * hp.n_embd);
  grow(ws_.xn, n_rows * hp.n_embd);
  grow(ws_.proj, n_rows * hp.n_embd);
  grow(ws_.q, n_rows * hp.q_width());
  grow(ws_.k, n_rows * hp.k_width());
  grow(ws_.v, n_rows * hp.v_width());
  grow(ws_.attn, n_rows * hp.attn_out_width());
  grow(ws_.gate, n_rows * hp.n_ff);
  grow(ws_.up, n_rows * hp.n_ff);
  grow(ws_.rope_cos, rope_.size() * n_rows * (hp.n_rot / 2));
  grow(ws_.rope_sin, rope_.size() * n_rows * (hp.n_rot / 2));
  attention_blocks_.clear();
  size_t first_row = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    for (size_t i = 0; i < segments[s].n_tokens; i += kAttentionBlockRows) {
      const size_t n = std::min(kAttentionBlockRows, segments[s].n_tokens - i);
      attention_blocks_.push_back(AttentionBlock{s, first_row + i, n});
    }
    first_row += segments[s].n_tokens;
  }
  const size_t group = hp.n_head / hp.n_head_kv;
  ws_.scores.resize(static_cast<size_t>(pool_->size()));
  const size_t scratch =
      cpu::attention_scratch_floats(kAttentionBlockRows * group, longest_span, hp.head_dim_k, hp.head_dim_v);
  for (auto& per_thread : ws_.scores) grow(per_thread, scratch);
  for (size_t s = 0; s < segments.size(); ++s) {
    if (!segments[s].replay) caches[s]->begin_write(segments[s].start, segments[s].n_tokens);
  }

  // Embedding lookup (and gemma's scale), then the RoPE angles of each row.
  cpu::dequantize_rows(*model_->weights.token_embd, tokens_.data(), n_rows, ws_.x.data());
  const size_t n_pairs = hp.n_rot / 2;
  for_row_chunks(n_rows, [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {
      if (hp.embd_scale != 1.0f) {
        float* x = ws_.x.data() + r * hp.n_embd;
        for (size_t i = 0; i < hp.n_embd; ++i) x[i] *= hp.embd_scale;
      }
      for (size_t kind = 0; kind < rope_.size(); ++kind) {
        const size_t at = (kind * n_rows + r) * n_pairs;
        rope_[kind].angles(rows_[r].position, ws_.rope_cos.data() + at, ws_.rope_sin.data() + at);
      }
    }
  });

  const int64_t fail_after_layer = faults.start_forward();
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    run_layer(il, segments, caches, n_rows);
    if (static_cast<int64_t>(il) == fail_after_layer) {
      throw InternalError("[cpu backend] injected fault after layer " + std::to_string(il) + " (test hook)");
    }
  }
  copy_hidden(segments);
  compute_logits(segments);

  for (size_t s = 0; s < segments.size(); ++s) {
    if (!segments[s].replay) caches[s]->end_write(segments[s].start, segments[s].n_tokens);
  }
}

void CpuBackend::run_layer(uint32_t il, const std::vector<ForwardSegment>& segments,
                           const std::vector<KvCache*>& caches, size_t n_rows) {
  const HParams& hp = model_->hparams;
  const LayerWeights& lw = model_->weights.layers[il];
  const LayerVectors& lv = layer_vectors_[il];
  const LayerAttention& la = hp.layers[il];
  ThreadPool& pool = *pool_;
  const size_t n_embd = hp.n_embd;
  const size_t q_width = hp.q_width(), k_width = hp.k_width(), v_width = hp.v_width();
  const size_t attn_width = hp.attn_out_width();
  const size_t n_pairs = hp.n_rot / 2;

  // --- attention block
  for_row_chunks(n_rows, [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {
      cpu::rms_norm(ws_.x.data() + r * n_embd, lv.attn_norm.data(), n_embd, hp.rms_eps,
                    ws_.xn.data() + r * n_embd);
    }
  });
  cpu::matmul(*lw.attn_q, packed_, ws_.xn.data(), n_rows, ws_.q.data(), pool);
  cpu::matmul(*lw.attn_k, packed_, ws_.xn.data(), n_rows, ws_.k.data(), pool);
  cpu::matmul(*lw.attn_v, packed_, ws_.xn.data(), n_rows, ws_.v.data(), pool);

  for_row_chunks(n_rows, [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {
      float* q = ws_.q.data() + r * q_width;
      float* k = ws_.k.data() + r * k_width;
      float* v = ws_.v.data() + r * v_width;
      if (hp.qkv_bias) {
        cpu::add_to(q, lv.q_bias.data(), q_width);
        cpu::add_to(k, lv.k_bias.data(), k_width);
        cpu::add_to(v, lv.v_bias.data(), v_width);
      }
      if (hp.qk_norm) {
        for (size_t h = 0; h < hp.n_head; ++h) {
          float* head = q + h * hp.head_dim_k;
          cpu::rms_norm(head, lv.q_norm.data(), hp.head_dim_k, hp.rms_eps, head);
        }
        for (size_t h = 0; h < hp.n_head_kv; ++h) {
          float* head = k + h * hp.head_dim_k;
          cpu::rms_norm(head, lv.k_norm.data(), hp.head_dim_k, hp.rms_eps, head);
        }
      }
      const size_t at = (lv.rope_kind * n_rows + r) * n_pairs;
      const float* cos = ws_.rope_cos.data() + at;
      const float* sin = ws_.rope_sin.data() + at;
      cpu::rope_heads(q, hp.n_head, hp.head_dim_k, hp.n_rot, hp.rope_style, cos, sin);
      cpu::rope_heads(k, hp.n_head_kv, hp.head_dim_k, hp.n_rot, hp.rope_style, cos, sin);
      // The row's keys and values go through the f16 cache before anyone
      // reads them, so a row attends to exactly the bits a later decode will.
      const Row& row = rows_[r];
      if (!segments[row.segment].replay) {
        KvCache& cache = *caches[row.segment];
        f16_.to_f16(k, cache.k_row(il, row.position), k_width);
        f16_.to_f16(v, cache.v_row(il, row.position), v_width);
      }
    }
  });

  // Attention tasks: a block of up to kAttentionBlockRows consecutive rows of
  // one segment times some query heads of one KV group. Each task converts a
  // key/value row once for all its queries; how tasks are cut changes no bits.
  const size_t group = hp.n_head / hp.n_head_kv;
  const size_t window = la.sliding ? hp.sliding_window : 0;
  const size_t n_blocks = attention_blocks_.size();
  const size_t heads_per_task =
      n_blocks * hp.n_head_kv >= 2 * static_cast<size_t>(pool.size()) ? group : 1;
  const size_t tasks_per_block = hp.n_head / heads_per_task;
  cpu::AttentionKv kv_head;
  kv_head.layer = il;
  kv_head.head_dim_k = hp.head_dim_k;
  kv_head.head_dim_v = hp.head_dim_v;
  kv_head.scale = hp.attn_scale;
  auto attention_task = [&](size_t task, int thread) {
    const AttentionBlock& block = attention_blocks_[task / tasks_per_block];
    const size_t first_head = (task % tasks_per_block) * heads_per_task;
    cpu::AttentionKv head = kv_head;
    head.k_offset = (first_head / group) * hp.head_dim_k;
    head.v_offset = (first_head / group) * hp.head_dim_v;
    cpu::AttentionQuery queries[kAttentionBlockRows * kMaxGroupHeads];
    size_t n_queries = 0;
    for (size_t r = block.first_row; r < block.first_row + block.n_rows; ++r) {
      const size_t position = rows_[r].position;
      const size_t first = window > 0 && position + 1 > window ? position + 1 - window : 0;
      for (size_t h = first_head; h < first_head + heads_per_task; ++h) {
        cpu::AttentionQuery& query = queries[n_queries++];
        query.q = ws_.q.data() + r * q_width + h * hp.head_dim_k;
        query.out = ws_.attn.data() + r * attn_width + h * hp.head_dim_v;
        query.first = first;
        query.last = position;
      }
    }
    cpu::attend_block(*caches[block.segment], head, queries, n_queries, f16_,
                      ws_.scores[static_cast<size_t>(thread)].data());
  };
  const size_t n_tasks = n_blocks * tasks_per_block;
  if (n_tasks == 1 || pool.size() == 1) {
    for (size_t task = 0; task < n_tasks; ++task) attention_task(task, 0);
  } else {
    pool.parallel_for(n_tasks, attention_task);
  }

  cpu::matmul(*lw.attn_output, packed_, ws_.attn.data(), n_rows, ws_.proj.data(), pool);
  for_row_chunks(n_rows, [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {
      float* proj = ws_.proj.data() + r * n_embd;
      float* x = ws_.x.data() + r * n_embd;
      if (hp.post_norms) cpu::rms_norm(proj, lv.post_attn_norm.data(), n_embd, hp.rms_eps, proj);
      cpu::add_to(x, proj, n_embd);
      cpu::rms_norm(x, lv.ffn_norm.data(), n_embd, hp.rms_eps, ws_.xn.data() + r * n_embd);
    }
  });

  // --- feed-forward block
  cpu::matmul(*lw.ffn_gate, packed_, ws_.xn.data(), n_rows, ws_.gate.data(), pool);
  cpu::matmul(*lw.ffn_up, packed_, ws_.xn.data(), n_rows, ws_.up.data(), pool);
  for_row_chunks(n_rows, [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {
      float* gate = ws_.gate.data() + r * hp.n_ff;
      const float* up = ws_.up.data() + r * hp.n_ff;
      if (hp.ffn_activation == FfnActivation::Silu) {
        activations_.swiglu(gate, up, hp.n_ff);
      } else {
        activations_.geglu(gate, up, hp.n_ff);
      }
    }
  });
  cpu::matmul(*lw.ffn_down, packed_, ws_.gate.data(), n_rows, ws_.proj.data(), pool);
  for_row_chunks(n_rows, [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {
      float* proj = ws_.proj.data() + r * n_embd;
      if (hp.post_norms) cpu::rms_norm(proj, lv.post_ffn_norm.data(), n_embd, hp.rms_eps, proj);
      cpu::add_to(ws_.x.data() + r * n_embd, proj, n_embd);
    }
  });
}

void CpuBackend::copy_hidden(const std::vector<ForwardSegment>& segments) {
  const HParams& hp = model_->hparams;
  size_t first_row = 0;
  for (const ForwardSegment& seg : segments) {
    if (seg.hidden != nullptr) {
      // The same rms_norm call compute_logits makes for the last row, so a
      // segment's last hidden vector is exactly what its logits came from.
      for_row_chunks(seg.n_tokens, [&](size_t first, size_t last) {
        for (size_t i = first; i < last; ++i) {
          cpu::rms_norm(ws_.x.data() + (first_row + i) * hp.n_embd, output_norm_.data(), hp.n_embd, hp.rms_eps,
                        seg.hidden + i * hp.n_embd);
        }
      });
    }
    first_row += seg.n_tokens;
  }
}

void CpuBackend::compute_logits(const std::vector<ForwardSegment>& segments) {
  const HParams& hp = model_->hparams;
  // Only the last row of a segment that asked for logits goes through the
  // output matrix (the largest one, for big vocabularies).
  std::vector<size_t> wanted;  // segment indices
  size_t row_end = 0;
  std::vector<size_t> last_row;
  for (size_t s = 0; s < segments.size(); ++s) {
    row_end += segments[s].n_tokens;
    if (segments[s].logits != nullptr) {
      wanted.push_back(s);
      last_row.push_back(row_end - 1);
    }
  }
  if (wanted.empty()) return;
  const size_t n_out = wanted.size();
  grow(ws_.logits, n_out * hp.n_vocab);
  for (size_t i = 0; i < n_out; ++i) {
    cpu::rms_norm(ws_.x.data() + last_row[i] * hp.n_embd, output_norm_.data(), hp.n_embd, hp.rms_eps,
                  ws_.xn.data() + i * hp.n_embd);
  }
  cpu::matmul(*model_->weights.output, packed_, ws_.xn.data(), n_out, ws_.logits.data(), *pool_);
  for (size_t i = 0; i < n_out; ++i) {
    float* logits = ws_.logits.data() + i * hp.n_vocab;
    if (hp.final_logit_softcap > 0.0f) cpu::softcap(logits, hp.n_vocab, hp.final_logit_softcap);
    std::memcpy(segments[wanted[i]].logits, logits, hp.n_vocab * sizeof(float));
  }
}

}  // namespace muser
