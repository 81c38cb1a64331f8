// qwen3: llama's decoder with an RMSNorm on every query and key head before
// RoPE, and NEOX RoPE.
#include "model/arch/architecture.h"
#include "model/arch/pre_norm_decoder.h"

namespace muser {
namespace {

void read_hparams(const GgufFile&, const HParamKeys&, HParams& hp) { hp.rope_style = RopeStyle::Neox; }

void bind_head_norms(WeightBinder& b, const HParams& hp, uint32_t il, AttentionWeights& attn) {
  attn.q_norm = b.vector(WeightBinder::layer(il, "attn_q_norm.weight"), hp.head_dim_k);
  attn.k_norm = b.vector(WeightBinder::layer(il, "attn_k_norm.weight"), hp.head_dim_k);
}

std::unique_ptr<ArchModel> bind(const GgufFile& file, const HParams& hp, WeightTable& weights) {
  WeightBinder b(file, weights);
  return std::make_unique<PreNormDecoder>(hp, b, bind_head_norms);
}

const ArchRegistration registration({"qwen3"}, "qwen3", ArchFactory{read_hparams, bind});

}  // namespace
}  // namespace muser
