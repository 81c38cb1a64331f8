// gemma3: sliding-window local layers (five local to one global by default)
// with their own RoPE base, per-head Q/K norms, RMSNorm both before and after
// the attention and feed-forward blocks, GeGLU, the embedding scaled by
// sqrt(n_embd), and optionally soft-capped logits.
#include <cmath>
#include <limits>
#include <vector>

#include "model/arch/architecture.h"
#include "model/arch/blocks.h"

namespace muser {
namespace {

struct Layer {
  uint32_t attn_norm, post_attn_norm, ffn_norm, post_ffn_norm;
  AttentionWeights attn;
  FfnWeights ffn;
};

class Gemma3 final : public ArchModel {
 public:
  Gemma3(const HParams& hp, WeightBinder& b) : hp_(hp), head_(bind_head(b, hp)) {
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
      Layer l;
      l.attn_norm = b.vector(WeightBinder::layer(il, "attn_norm.weight"), hp.n_embd);
      l.attn = bind_attention(b, hp, il);
      l.attn.q_norm = b.vector(WeightBinder::layer(il, "attn_q_norm.weight"), hp.head_dim_k);
      l.attn.k_norm = b.vector(WeightBinder::layer(il, "attn_k_norm.weight"), hp.head_dim_k);
      l.ffn_norm = b.vector(WeightBinder::layer(il, "ffn_norm.weight"), hp.n_embd);
      l.ffn = bind_ffn(b, hp, il);
      l.post_attn_norm = b.vector(WeightBinder::layer(il, "post_attention_norm.weight"), hp.n_embd);
      l.post_ffn_norm = b.vector(WeightBinder::layer(il, "post_ffw_norm.weight"), hp.n_embd);
      layers_.push_back(l);
    }
  }

  TensorId build_step(GraphBuilder& g) const override {
    StepTensors t = step_tensors(g, hp_);
    embed_tokens(g, hp_, t, head_.token_embd);
    for (uint32_t il = 0; il < hp_.n_layer; ++il) {
      const Layer& l = layers_[il];
      norm(g, hp_, t.xn, t.x, l.attn_norm);
      project_qkv(g, t, l.attn, t.xn);
      attend(g, hp_, il, t, l.attn, head_.rope_divisors);
      residual(g, hp_, t, l.post_attn_norm);
      norm(g, hp_, t.xn, t.x, l.ffn_norm);
      glu_ffn(g, t, l.ffn, GluKind::GeluTanh, t.xn);
      residual(g, hp_, t, l.post_ffn_norm);
      g.end_layer();
    }
    return output_head(g, hp_, t, head_.output_norm, head_.output);
  }

 private:
  HParams hp_;
  HeadWeights head_;
  std::vector<Layer> layers_;
};

void read_hparams(const GgufFile&, const HParamKeys& keys, HParams& hp) {
  hp.rope_style = RopeStyle::Neox;
  hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
  // Gemma 3 27B scales queries by its hidden size per head rather than by its
  // head size (query_pre_attn_scalar = 168 in its config).
  if (hp.n_layer == 62 && hp.n_embd % hp.n_head == 0) {
    hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head));
  }
  // The logits are soft-capped when the file gives a cap (Gemma 3's released
  // configs give none). Without a window (the key absent or 0) every layer is
  // global.
  hp.final_logit_softcap = static_cast<float>(keys.non_negative("final_logit_softcapping"));
  hp.sliding_window = keys.count("attention.sliding_window", 0, std::numeric_limits<int32_t>::max(), 0);
  if (hp.sliding_window == 0) return;
  // Local layers rotate with their own base and no position scaling.
  const double local_base = keys.positive("rope.freq_base_swa", 10000.0);
  const std::vector<bool> sliding = keys.sliding_layers(hp.n_layer, 6);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (sliding[il]) hp.layers[il] = LayerAttention{true, local_base, 1.0, true};
  }
}

std::unique_ptr<ArchModel> bind(const GgufFile& file, const HParams& hp, WeightTable& weights) {
  WeightBinder b(file, weights);
  return std::make_unique<Gemma3>(hp, b);
}

const ArchRegistration registration({"gemma3"}, "gemma3", ArchFactory{read_hparams, bind});

}  // namespace
}  // namespace muser
