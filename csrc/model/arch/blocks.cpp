#include "model/arch/blocks.h"

namespace muser {

StepTensors step_tensors(GraphBuilder& g, const HParams& hp) {
  const size_t rows = g.shape().n_rows;
  StepTensors t;
  t.tokens = g.input(InputRole::Tokens);
  t.positions = g.input(InputRole::Positions);
  t.output_rows = g.input(InputRole::OutputRows);
  t.x = g.activation("x", rows, hp.n_embd);
  t.xn = g.activation("xn", rows, hp.n_embd);
  t.q = g.activation("q", rows, hp.q_width());
  t.k = g.activation("k", rows, hp.k_width());
  t.v = g.activation("v", rows, hp.v_width());
  t.attn = g.activation("attn", rows, hp.attn_out_width());
  t.proj = g.activation("proj", rows, hp.n_embd);
  t.gate = g.activation("gate", rows, hp.n_ff);
  t.up = g.activation("up", rows, hp.n_ff);
  return t;
}

void embed_tokens(GraphBuilder& g, const HParams& hp, const StepTensors& t, uint32_t token_embd) {
  g.get_rows(t.x, g.weight(token_embd), t.tokens);
  if (hp.embd_scale != 1.0f) g.scale(t.x, t.x, hp.embd_scale);
}

void norm(GraphBuilder& g, const HParams& hp, TensorId dst, TensorId src, uint32_t w) {
  g.rms_norm(dst, src, g.weight(w), hp.rms_eps);
}

void project_qkv(GraphBuilder& g, const StepTensors& t, const AttentionWeights& w, TensorId in) {
  g.mul_mat(t.q, g.weight(w.q), in);
  g.mul_mat(t.k, g.weight(w.k), in);
  g.mul_mat(t.v, g.weight(w.v), in);
}

void attend(GraphBuilder& g, const HParams& hp, uint32_t il, const StepTensors& t, const AttentionWeights& w,
            uint32_t rope_divisors) {
  if (w.q_bias != kNoWeight) g.add(t.q, t.q, g.weight(w.q_bias));
  if (w.k_bias != kNoWeight) g.add(t.k, t.k, g.weight(w.k_bias));
  if (w.v_bias != kNoWeight) g.add(t.v, t.v, g.weight(w.v_bias));
  if (w.q_norm != kNoWeight) g.rms_norm(t.q, t.q, g.weight(w.q_norm), hp.rms_eps, hp.head_dim_k);
  if (w.k_norm != kNoWeight) g.rms_norm(t.k, t.k, g.weight(w.k_norm), hp.rms_eps, hp.head_dim_k);
  const LayerAttention& la = hp.layers[il];
  if (la.rope) {
    OpParams p;
    p.rope_style = hp.rope_style;
    p.rope_base = la.rope_base;
    p.rope_freq_scale = la.rope_freq_scale;
    p.n_rot = hp.n_rot;
    p.head_dim_k = hp.head_dim_k;
    const TensorId divisors = rope_divisors == kNoWeight ? kNoTensor : g.weight(rope_divisors);
    p.n_head = hp.n_head;
    g.rope(t.q, t.q, t.positions, divisors, p);
    p.n_head = hp.n_head_kv;
    g.rope(t.k, t.k, t.positions, divisors, p);
  }
  g.kv_store(il, t.k, t.v);
  OpParams a;
  a.n_head = hp.n_head;
  a.n_head_kv = hp.n_head_kv;
  a.head_dim_k = hp.head_dim_k;
  a.head_dim_v = hp.head_dim_v;
  a.scalar = hp.attn_scale;
  a.window = la.sliding ? hp.sliding_window : 0;
  a.layer = il;
  g.attention(t.attn, t.q, a);
  g.mul_mat(t.proj, g.weight(w.output), t.attn);
}

void glu_ffn(GraphBuilder& g, const StepTensors& t, const FfnWeights& w, GluKind kind, TensorId in) {
  g.mul_mat(t.gate, g.weight(w.gate), in);
  g.mul_mat(t.up, g.weight(w.up), in);
  g.glu(t.gate, t.gate, t.up, kind);
  g.mul_mat(t.proj, g.weight(w.down), t.gate);
}

void residual(GraphBuilder& g, const HParams& hp, const StepTensors& t, uint32_t post_norm) {
  if (post_norm != kNoWeight) norm(g, hp, t.proj, t.proj, post_norm);
  g.add(t.x, t.x, t.proj);
}

TensorId output_head(GraphBuilder& g, const HParams& hp, const StepTensors& t, uint32_t output_norm,
                     uint32_t output) {
  // Only the rows whose logits leave the step go through the output matrix
  // (the largest one, for big vocabularies).
  const size_t n_out = g.shape().n_out;
  const TensorId last = g.activation("out_x", n_out, hp.n_embd);
  const TensorId normed = g.activation("out_xn", n_out, hp.n_embd);
  const TensorId logits = g.activation("logits", n_out, hp.n_vocab);
  if (g.shape().hidden) {
    // Every row's final hidden state: the same norm the output rows get.
    const TensorId hidden = g.activation("hidden", g.shape().n_rows, hp.n_embd);
    norm(g, hp, hidden, t.x, output_norm);
    g.set_hidden(hidden);
  }
  g.get_rows(last, t.x, t.output_rows);
  norm(g, hp, normed, last, output_norm);
  g.mul_mat(logits, g.weight(output), normed);
  if (hp.final_logit_softcap > 0.0f) g.softcap(logits, logits, hp.final_logit_softcap);
  return logits;
}

HeadWeights bind_head(WeightBinder& b, const HParams& hp) {
  HeadWeights h;
  if (b.has("rope_freqs.weight")) h.rope_divisors = b.vector("rope_freqs.weight", hp.n_rot / 2);
  h.token_embd = b.matrix("token_embd.weight", hp.n_embd, hp.n_vocab);
  h.output_norm = b.vector("output_norm.weight", hp.n_embd);
  if (b.has("output.weight")) {
    h.output = b.matrix("output.weight", hp.n_embd, hp.n_vocab);
    b.lookup_only(h.token_embd);  // embed_tokens only looks rows up
  } else {
    h.output = h.token_embd;  // tied: the output product reads it too
  }
  return h;
}

AttentionWeights bind_attention(WeightBinder& b, const HParams& hp, uint32_t il) {
  AttentionWeights w;
  w.q = b.matrix(WeightBinder::layer(il, "attn_q.weight"), hp.n_embd, hp.q_width());
  w.k = b.matrix(WeightBinder::layer(il, "attn_k.weight"), hp.n_embd, hp.k_width());
  w.v = b.matrix(WeightBinder::layer(il, "attn_v.weight"), hp.n_embd, hp.v_width());
  w.output = b.matrix(WeightBinder::layer(il, "attn_output.weight"), hp.attn_out_width(), hp.n_embd);
  return w;
}

FfnWeights bind_ffn(WeightBinder& b, const HParams& hp, uint32_t il) {
  FfnWeights w;
  w.gate = b.matrix(WeightBinder::layer(il, "ffn_gate.weight"), hp.n_embd, hp.n_ff);
  w.up = b.matrix(WeightBinder::layer(il, "ffn_up.weight"), hp.n_embd, hp.n_ff);
  w.down = b.matrix(WeightBinder::layer(il, "ffn_down.weight"), hp.n_ff, hp.n_embd);
  return w;
}

}  // namespace muser
