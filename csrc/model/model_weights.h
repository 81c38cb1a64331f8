// The tensors of a model, looked up by name in the GGUF file and checked
// against the shapes its hyperparameters imply. Pointers are into the
// GgufFile's tensor table (zero-copy views of the one mapping); the file must
// outlive this struct.
#pragma once

#include <vector>

#include "model/hparams.h"
#include "weights/gguf_file.h"

namespace muser {

struct LayerWeights {
  const TensorInfo* attn_norm = nullptr;       // (n_embd)
  const TensorInfo* attn_q = nullptr;          // (n_embd -> q_width)
  const TensorInfo* attn_k = nullptr;          // (n_embd -> k_width)
  const TensorInfo* attn_v = nullptr;          // (n_embd -> v_width)
  const TensorInfo* attn_output = nullptr;     // (attn_out_width -> n_embd)
  const TensorInfo* attn_q_bias = nullptr;     // (q_width), qwen2 only
  const TensorInfo* attn_k_bias = nullptr;     // (k_width), qwen2 only
  const TensorInfo* attn_v_bias = nullptr;     // (v_width), qwen2 only
  const TensorInfo* attn_q_norm = nullptr;     // (head_dim_k), qk_norm only
  const TensorInfo* attn_k_norm = nullptr;     // (head_dim_k), qk_norm only
  const TensorInfo* post_attn_norm = nullptr;  // (n_embd), post_norms only
  const TensorInfo* ffn_norm = nullptr;        // (n_embd)
  const TensorInfo* ffn_gate = nullptr;        // (n_embd -> n_ff)
  const TensorInfo* ffn_up = nullptr;          // (n_embd -> n_ff)
  const TensorInfo* ffn_down = nullptr;        // (n_ff -> n_embd)
  const TensorInfo* post_ffn_norm = nullptr;   // (n_embd), post_norms only
};

struct ModelWeights {
  const TensorInfo* token_embd = nullptr;   // (n_embd, n_vocab) in ggml order
  const TensorInfo* output_norm = nullptr;  // (n_embd)
  const TensorInfo* output = nullptr;       // (n_embd -> n_vocab); == token_embd when tied
  bool tied_output = false;                 // the file has no output.weight
  // (n_rot / 2) divisors of the RoPE frequencies (llama 3 style), or null.
  const TensorInfo* rope_freqs = nullptr;
  std::vector<LayerWeights> layers;

  // Finds every tensor the architecture needs. Throws ModelFormatError naming
  // the tensor for a missing one, a wrong shape (expected vs actual, ggml
  // order) or a type the graph cannot use (vectors must be F32, F16 or BF16).
  static ModelWeights bind(const GgufFile& file, const HParams& hp);
};

}  // namespace muser
