// olmo2: no norm before the sublayers (they read the residual stream
// itself); Q and K are RMS-normed over their whole width (all heads at once)
// before NEOX RoPE; each sublayer output is RMS-normed before the residual
// add; SwiGLU feed-forward. Sliding-window variants are refused.
#include <vector>

#include "model/arch/architecture.h"
#include "model/arch/blocks.h"

namespace muser {
namespace {

struct Layer {
  AttentionWeights attn;
  uint32_t q_norm, k_norm, post_attn_norm, post_ffn_norm;
  FfnWeights ffn;
};

class Olmo2 final : public ArchModel {
 public:
  Olmo2(const HParams& hp, WeightBinder& b) : hp_(hp), head_(bind_head(b, hp)) {
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
      Layer l;
      l.attn = bind_attention(b, hp, il);
      l.q_norm = b.vector(WeightBinder::layer(il, "attn_q_norm.weight"), hp.q_width());
      l.k_norm = b.vector(WeightBinder::layer(il, "attn_k_norm.weight"), hp.k_width());
      l.post_attn_norm = b.vector(WeightBinder::layer(il, "post_attention_norm.weight"), hp.n_embd);
      l.ffn = bind_ffn(b, hp, il);
      l.post_ffn_norm = b.vector(WeightBinder::layer(il, "post_ffw_norm.weight"), hp.n_embd);
      layers_.push_back(l);
    }
  }

  TensorId build_step(GraphBuilder& g) const override {
    StepTensors t = step_tensors(g, hp_);
    embed_tokens(g, hp_, t, head_.token_embd);
    for (uint32_t il = 0; il < hp_.n_layer; ++il) {
      const Layer& l = layers_[il];
      project_qkv(g, t, l.attn, t.x);
      norm(g, hp_, t.q, t.q, l.q_norm);
      norm(g, hp_, t.k, t.k, l.k_norm);
      attend(g, hp_, il, t, l.attn, head_.rope_divisors);
      residual(g, hp_, t, l.post_attn_norm);
      glu_ffn(g, t, l.ffn, GluKind::Silu, t.x);
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
  if (keys.count("attention.sliding_window", 0, ~uint32_t{0}, 0) != 0) {
    HParamKeys::fail("key '" + keys.key("attention.sliding_window") +
                     "': olmo2 with sliding-window layers is not supported (expected 0 or absent)");
  }
}

std::unique_ptr<ArchModel> bind(const GgufFile& file, const HParams& hp, WeightTable& weights) {
  WeightBinder b(file, weights);
  if (!b.has("output.weight")) HParamKeys::fail("olmo2: missing tensor 'output.weight' (olmo2 has no tied output)");
  return std::make_unique<Olmo2>(hp, b);
}

const ArchRegistration registration({"olmo2"}, "olmo2", ArchFactory{read_hparams, bind});

}  // namespace
}  // namespace muser
