// Pieces of a decoder step that architectures share: the activations of a
// step, the token embedding, Q/K/V projection, attention over the KV, the
// gated feed-forward, residual adds and the output head. An architecture
// file binds its tensors into these structs and strings the pieces together
// in its own order; a piece does only what the weights it is given imply
// (an absent bias or norm is kNoWeight and records no op).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "model/arch/weight_binder.h"
#include "model/hparams.h"

namespace muser {

// The activations of one step, reused by every layer. (rows = step rows)
struct StepTensors {
  TensorId tokens, positions, output_rows;  // inputs
  TensorId x;     // (rows, n_embd) residual stream
  TensorId xn;    // (rows, n_embd) normed input of a block
  TensorId q;     // (rows, q_width)
  TensorId k;     // (rows, k_width)
  TensorId v;     // (rows, v_width)
  TensorId attn;  // (rows, attn_out_width) attention output
  TensorId proj;  // (rows, n_embd) a block's output before the residual add
  TensorId gate;  // (rows, n_ff)
  TensorId up;    // (rows, n_ff)
};

struct AttentionWeights {
  uint32_t q = kNoWeight, k = kNoWeight, v = kNoWeight, output = kNoWeight;  // matrices
  uint32_t q_bias = kNoWeight, k_bias = kNoWeight, v_bias = kNoWeight;       // vectors, added after projection
  uint32_t q_norm = kNoWeight, k_norm = kNoWeight;  // RMSNorm of each head before RoPE
};

struct FfnWeights {
  uint32_t gate = kNoWeight, up = kNoWeight, down = kNoWeight;
};

// Inputs and activations of a step of g.shape().n_rows rows.
StepTensors step_tensors(GraphBuilder& g, const HParams& hp);

// x = embedding rows of the tokens (times hp.embd_scale when it is not 1).
void embed_tokens(GraphBuilder& g, const HParams& hp, const StepTensors& t, uint32_t token_embd);

// dst = RMSNorm(src) * w over whole rows.
void norm(GraphBuilder& g, const HParams& hp, TensorId dst, TensorId src, uint32_t w);

// q, k, v = `in` (usually t.xn) times the three projection matrices.
void project_qkv(GraphBuilder& g, const StepTensors& t, const AttentionWeights& w, TensorId in);

// From projected q, k, v: biases, per-head norms, RoPE (unless the layer has
// none), the KV write, attention over layer il's KV, and the output
// projection into t.proj.
void attend(GraphBuilder& g, const HParams& hp, uint32_t il, const StepTensors& t, const AttentionWeights& w,
            uint32_t rope_divisors);

// t.proj = down(act(gate(in)) * up(in)), `in` usually t.xn.
void glu_ffn(GraphBuilder& g, const StepTensors& t, const FfnWeights& w, GluKind kind, TensorId in);

// x += proj, after normalizing proj with post_norm when given.
void residual(GraphBuilder& g, const HParams& hp, const StepTensors& t, uint32_t post_norm);

// The logits of the output rows: final norm, output matrix, soft-cap; and,
// when the shape class asks, every row's final normed hidden state.
TensorId output_head(GraphBuilder& g, const HParams& hp, const StepTensors& t, uint32_t output_norm,
                     uint32_t output);

// Binds token_embd, output_norm and output (tied to token_embd when the file
// has no output.weight).
struct HeadWeights {
  uint32_t token_embd = kNoWeight, output_norm = kNoWeight, output = kNoWeight;
  uint32_t rope_divisors = kNoWeight;  // rope_freqs.weight (llama 3 style), when present
};
HeadWeights bind_head(WeightBinder& b, const HParams& hp);

// The separate Q, K, V and output projections of layer il (no biases, norms).
AttentionWeights bind_attention(WeightBinder& b, const HParams& hp, uint32_t il);
FfnWeights bind_ffn(WeightBinder& b, const HParams& hp, uint32_t il);

}  // namespace muser
