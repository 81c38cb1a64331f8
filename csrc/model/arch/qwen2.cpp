// qwen2: llama's decoder with biases on the Q, K and V projections and NEOX
// RoPE (dimension i pairs with i + n_rot/2).
#include <vector>

#include "model/arch/architecture.h"
#include "model/arch/blocks.h"

namespace muser {
namespace {

struct Layer {
  uint32_t attn_norm, ffn_norm;
  AttentionWeights attn;
  FfnWeights ffn;
};

class Qwen2 final : public ArchModel {
 public:
  Qwen2(const HParams& hp, WeightBinder& b) : hp_(hp), head_(bind_head(b, hp)) {
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
      Layer l;
      l.attn_norm = b.vector(WeightBinder::layer(il, "attn_norm.weight"), hp.n_embd);
      l.attn = bind_attention(b, hp, il);
      l.attn.q_bias = b.vector(WeightBinder::layer(il, "attn_q.bias"), hp.q_width());
      l.attn.k_bias = b.vector(WeightBinder::layer(il, "attn_k.bias"), hp.k_width());
      l.attn.v_bias = b.vector(WeightBinder::layer(il, "attn_v.bias"), hp.v_width());
      l.ffn_norm = b.vector(WeightBinder::layer(il, "ffn_norm.weight"), hp.n_embd);
      l.ffn = bind_ffn(b, hp, il);
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
      residual(g, hp_, t, kNoWeight);
      norm(g, hp_, t.xn, t.x, l.ffn_norm);
      glu_ffn(g, t, l.ffn, GluKind::Silu, t.xn);
      residual(g, hp_, t, kNoWeight);
      g.end_layer();
    }
    return output_head(g, hp_, t, head_.output_norm, head_.output);
  }

 private:
  HParams hp_;
  HeadWeights head_;
  std::vector<Layer> layers_;
};

void read_hparams(const GgufFile&, const HParamKeys&, HParams& hp) { hp.rope_style = RopeStyle::Neox; }

std::unique_ptr<ArchModel> bind(const GgufFile& file, const HParams& hp, WeightTable& weights) {
  WeightBinder b(file, weights);
  return std::make_unique<Qwen2>(hp, b);
}

const ArchRegistration registration({"qwen2"}, "qwen2", ArchFactory{read_hparams, bind});

}  // namespace
}  // namespace muser
