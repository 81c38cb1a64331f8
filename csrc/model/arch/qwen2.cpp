// qwen2: llama's decoder with biases on the Q, K and V projections and NEOX
// RoPE (dimension i pairs with i + n_rot/2).
#include "model/arch/architecture.h"
#include "model/arch/pre_norm_decoder.h"

namespace muser {
namespace {

void read_hparams(const GgufFile&, const HParamKeys&, HParams& hp) { hp.rope_style = RopeStyle::Neox; }

void bind_biases(WeightBinder& b, const HParams& hp, uint32_t il, AttentionWeights& attn) {
  attn.q_bias = b.vector(WeightBinder::layer(il, "attn_q.bias"), hp.q_width());
  attn.k_bias = b.vector(WeightBinder::layer(il, "attn_k.bias"), hp.k_width());
  attn.v_bias = b.vector(WeightBinder::layer(il, "attn_v.bias"), hp.v_width());
}

std::unique_ptr<ArchModel> bind(const GgufFile& file, const HParams& hp, WeightTable& weights) {
  WeightBinder b(file, weights);
  return std::make_unique<PreNormDecoder>(hp, b, bind_biases);
}

const ArchRegistration registration({"qwen2"}, "qwen2", ArchFactory{read_hparams, bind});

}  // namespace
}  // namespace muser
