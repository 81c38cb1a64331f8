// phi3: llama's pre-norm decoder with NEOX RoPE, but one fused Q/K/V
// projection (attn_qkv: Q, K and V laid end to end) and one fused
// gate/up projection (ffn_up: 2 * n_ff outputs, the gate first). Files with
// separate attn_q/k/v are read too. LongRoPE factors (the 128k variants) are
// not implemented and refused.
#include <vector>

#include "model/arch/architecture.h"
#include "model/arch/blocks.h"

namespace muser {
namespace {

struct Layer {
  uint32_t attn_norm, ffn_norm;
  uint32_t qkv = kNoWeight;  // fused; kNoWeight when the file has separate Q/K/V
  AttentionWeights attn;
  uint32_t gate_up, down;
};

class Phi3 final : public ArchModel {
 public:
  Phi3(const HParams& hp, WeightBinder& b) : hp_(hp), head_(bind_head(b, hp)) {
    if (b.has("rope_factors_long.weight") || b.has("rope_factors_short.weight")) {
      HParamKeys::fail("phi3: LongRoPE factors (rope_factors_long/short) are not supported");
    }
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
      Layer l;
      l.attn_norm = b.vector(WeightBinder::layer(il, "attn_norm.weight"), hp.n_embd);
      const std::string qkv = WeightBinder::layer(il, "attn_qkv.weight");
      if (b.has(qkv)) {
        l.qkv = b.matrix(qkv, hp.n_embd, hp.q_width() + hp.k_width() + hp.v_width());
        l.attn.output = b.matrix(WeightBinder::layer(il, "attn_output.weight"), hp.attn_out_width(), hp.n_embd);
      } else {
        l.attn = bind_attention(b, hp, il);
      }
      l.ffn_norm = b.vector(WeightBinder::layer(il, "ffn_norm.weight"), hp.n_embd);
      l.gate_up = b.matrix(WeightBinder::layer(il, "ffn_up.weight"), hp.n_embd, 2 * uint64_t{hp.n_ff});
      l.down = b.matrix(WeightBinder::layer(il, "ffn_down.weight"), hp.n_ff, hp.n_embd);
      layers_.push_back(l);
    }
  }

  TensorId build_step(GraphBuilder& g) const override {
    const size_t rows = g.shape().n_rows;
    StepTensors t = step_tensors(g, hp_);
    const TensorId qkv = g.activation("qkv", rows, hp_.q_width() + hp_.k_width() + hp_.v_width());
    const TensorId gate_up = g.activation("gate_up", rows, 2 * size_t{hp_.n_ff});
    embed_tokens(g, hp_, t, head_.token_embd);
    for (uint32_t il = 0; il < hp_.n_layer; ++il) {
      const Layer& l = layers_[il];
      norm(g, hp_, t.xn, t.x, l.attn_norm);
      if (l.qkv != kNoWeight) {
        g.mul_mat(qkv, g.weight(l.qkv), t.xn);
        g.slice_cols(t.q, qkv, 0);
        g.slice_cols(t.k, qkv, hp_.q_width());
        g.slice_cols(t.v, qkv, size_t{hp_.q_width()} + hp_.k_width());
      } else {
        project_qkv(g, t, l.attn, t.xn);
      }
      attend(g, hp_, il, t, l.attn, head_.rope_divisors);
      residual(g, hp_, t, kNoWeight);
      norm(g, hp_, t.xn, t.x, l.ffn_norm);
      g.mul_mat(gate_up, g.weight(l.gate_up), t.xn);
      g.slice_cols(t.gate, gate_up, 0);
      g.slice_cols(t.up, gate_up, hp_.n_ff);
      g.glu(t.gate, t.gate, t.up, GluKind::Silu);
      g.mul_mat(t.proj, g.weight(l.down), t.gate);
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

// llama.cpp ignores phi3's sliding-window key (its SWA is disabled), and so
// does this file: every layer is global.
void read_hparams(const GgufFile&, const HParamKeys&, HParams& hp) { hp.rope_style = RopeStyle::Neox; }

std::unique_ptr<ArchModel> bind(const GgufFile& file, const HParams& hp, WeightTable& weights) {
  WeightBinder b(file, weights);
  return std::make_unique<Phi3>(hp, b);
}

const ArchRegistration registration({"phi3"}, "phi3", ArchFactory{read_hparams, bind});

}  // namespace
}  // namespace muser
