// Hyperparameters of a model, read once from GGUF metadata and validated.
// Immutable afterwards; everything downstream (tensor shapes, KV layout, the
// forward graph) is derived from this struct alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/architecture.h"

namespace muser {

class GgufFile;

// How RoPE pairs the dimensions of a head: Normal rotates (x[2i], x[2i+1]),
// Neox rotates (x[i], x[i + n_rot/2]). Which one a family uses is fixed by how
// its converter laid out the Q/K weights.
enum class RopeStyle { Normal, Neox };

enum class FfnActivation {
  Silu,      // SwiGLU: silu(gate) * up
  GeluTanh,  // GeGLU: gelu(gate) * up, tanh approximation
};

// Per-layer attention settings. Sliding-window (local) layers see only the
// last `sliding_window` positions and may rotate with their own RoPE base.
struct LayerAttention {
  bool sliding = false;
  double rope_base = 10000.0;
  double rope_freq_scale = 1.0;  // positions are multiplied by this (linear scaling)
};

struct HParams {
  Arch arch = Arch::Llama;
  std::string arch_name;  // general.architecture as written (the metadata key prefix)

  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;
  uint32_t n_embd = 0;
  uint32_t n_layer = 0;
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t head_dim_k = 0;  // per head, queries and keys
  uint32_t head_dim_v = 0;  // per head, values
  uint32_t n_ff = 0;
  uint32_t n_rot = 0;  // leading dimensions of each head that RoPE rotates (even)
  float rms_eps = 1e-5f;

  RopeStyle rope_style = RopeStyle::Normal;
  FfnActivation ffn_activation = FfnActivation::Silu;
  bool qkv_bias = false;      // qwen2
  bool qk_norm = false;       // qwen3, gemma3
  bool post_norms = false;    // gemma3: RMSNorm after attention and after the FFN
  float embd_scale = 1.0f;    // gemma3: sqrt(n_embd)
  float attn_scale = 1.0f;    // multiplies Q.K before the softmax
  float final_logit_softcap = 0.0f;  // 0 = none; else cap * tanh(logit / cap) (gemma3)

  uint32_t sliding_window = 0;  // positions a local layer sees, itself included; 0 = none
  std::vector<LayerAttention> layers;

  // Reads and validates everything. Throws ModelFormatError naming the key,
  // with expected vs actual, for a missing, mistyped or out-of-range value,
  // and for an unsupported architecture (listing the supported ones).
  static HParams from_gguf(const GgufFile& file);

  uint32_t q_width() const { return n_head * head_dim_k; }      // query row
  uint32_t k_width() const { return n_head_kv * head_dim_k; }   // key row (all KV heads)
  uint32_t v_width() const { return n_head_kv * head_dim_v; }   // value row
  uint32_t attn_out_width() const { return n_head * head_dim_v; }
  bool has_sliding_layers() const;
};

}  // namespace muser
