// Hyperparameters of a model, read once from GGUF metadata and validated.
// Immutable afterwards; everything downstream (tensor shapes, KV layout, the
// step graphs) is derived from this struct and the architecture's file.
// The common keys are read here; each architecture file (model/arch/) reads
// its own through HParamKeys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ops.h"

namespace muser {

class GgufFile;

// Per-layer attention settings. Sliding-window (local) layers see only the
// last `sliding_window` positions and may rotate with their own RoPE base.
struct LayerAttention {
  bool sliding = false;
  double rope_base = 10000.0;
  double rope_freq_scale = 1.0;  // positions are multiplied by this (linear scaling)
  bool rope = true;              // false: the layer applies no rotary embedding
};

struct HParams {
  std::string arch_name;  // general.architecture as written (the metadata key prefix)
  std::string family;     // the architecture file serving it

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

  // How RoPE pairs the dimensions of a head (fixed by how the family's
  // converter laid out the Q/K weights; set by the architecture file).
  RopeStyle rope_style = RopeStyle::Normal;
  float embd_scale = 1.0f;    // multiplies the embedding rows (gemma3: sqrt(n_embd))
  float attn_scale = 1.0f;    // multiplies Q.K before the softmax
  float final_logit_softcap = 0.0f;  // 0 = none; else cap * tanh(logit / cap)

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

// Typed getters for one architecture's keys ("<arch>.<name>"), each with the
// range check the graph relies on; ModelFormatError naming the key otherwise.
class HParamKeys {
 public:
  HParamKeys(const GgufFile& file, std::string prefix) : file_(file), prefix_(std::move(prefix)) {}

  std::string key(const char* name) const { return prefix_ + "." + name; }
  bool has(const char* name) const;

  uint32_t count(const char* name, uint64_t min, uint64_t max) const;
  uint32_t count(const char* name, uint64_t min, uint64_t max, uint64_t fallback) const;
  double positive(const char* name, double fallback) const;
  // Optional non-negative number; 0 when absent.
  double non_negative(const char* name) const;
  // Which of n_layer layers are local: the key "attention.sliding_window_pattern"
  // as one bool per layer or a period n (layer il global when il % n == n - 1;
  // 0: every layer local), default_period when absent.
  std::vector<bool> sliding_layers(uint32_t n_layer, uint32_t default_period) const;

  [[noreturn]] static void fail(const std::string& what);

 private:
  uint32_t checked(const char* name, uint64_t v, uint64_t min, uint64_t max) const;

  const GgufFile& file_;
  std::string prefix_;
};

}  // namespace muser
