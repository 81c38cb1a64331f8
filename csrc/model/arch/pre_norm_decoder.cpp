#include "model/arch/pre_norm_decoder.h"

namespace muser {

PreNormDecoder::PreNormDecoder(const HParams& hp, WeightBinder& b, const LayerExtras& extras)
    : hp_(hp), head_(bind_head(b, hp)) {
  layers_.reserve(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    PreNormLayer l;
    l.attn_norm = b.vector(WeightBinder::layer(il, "attn_norm.weight"), hp.n_embd);
    l.attn = bind_attention(b, hp, il);
    if (extras) extras(b, hp, il, l.attn);
    l.ffn_norm = b.vector(WeightBinder::layer(il, "ffn_norm.weight"), hp.n_embd);
    l.ffn = bind_ffn(b, hp, il);
    layers_.push_back(l);
  }
}

TensorId PreNormDecoder::build_step(GraphBuilder& g) const {
  StepTensors t = step_tensors(g, hp_);
  embed_tokens(g, hp_, t, head_.token_embd);
  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    const PreNormLayer& l = layers_[il];
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

}  // namespace muser
