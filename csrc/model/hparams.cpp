#include "model/hparams.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/arch/architecture.h"
#include "weights/gguf_file.h"
#include "weights/memory_budget.h"

namespace muser {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw ModelFormatError(format_where("hparams", what));
}

// Bounds that no real model reaches; they keep a hostile file from sizing
// absurd buffers before the tensor shapes are checked.
constexpr uint64_t kMaxDim = 1u << 20;
constexpr uint64_t kMaxLayers = 4096;
constexpr uint64_t kMaxHeads = 4096;
constexpr uint64_t kMaxHeadDim = 4096;

}  // namespace

void HParamKeys::fail(const std::string& what) { throw ModelFormatError(format_where("hparams", what)); }

bool HParamKeys::has(const char* name) const { return file_.has(key(name)); }

uint32_t HParamKeys::count(const char* name, uint64_t min, uint64_t max) const {
  return checked(name, file_.get_uint(key(name)), min, max);
}
uint32_t HParamKeys::count(const char* name, uint64_t min, uint64_t max, uint64_t fallback) const {
  return checked(name, file_.get_uint(key(name), fallback), min, max);
}
double HParamKeys::positive(const char* name, double fallback) const {
  double v = file_.get_float(key(name), fallback);
  if (!(std::isfinite(v) && v > 0)) {
    fail("key '" + key(name) + "': expected a finite positive number, got " + std::to_string(v));
  }
  return v;
}
double HParamKeys::non_negative(const char* name) const {
  double v = file_.get_float(key(name), 0.0);
  if (!(std::isfinite(v) && v >= 0)) {
    fail("key '" + key(name) + "': expected a finite non-negative number, got " + std::to_string(v));
  }
  return v;
}
uint32_t HParamKeys::checked(const char* name, uint64_t v, uint64_t min, uint64_t max) const {
  if (v < min || v > max) {
    fail("key '" + key(name) + "': expected a value in [" + std::to_string(min) + ", " +
         std::to_string(max) + "], got " + std::to_string(v));
  }
  return static_cast<uint32_t>(v);
}

namespace {

using Keys = HParamKeys;

uint32_t read_vocab_size(const GgufFile& file, const Keys& keys) {
  const GgufArray* tokens = file.get_array("tokenizer.ggml.tokens", false);
  if (keys.has("vocab_size")) {
    const uint32_t n_vocab = keys.count("vocab_size", 1, std::numeric_limits<int32_t>::max());
    // Logits have n_vocab entries and any of them can be sampled; each must
    // be a token the tokenizer can turn into text (and every token a row).
    if (tokens != nullptr && tokens->count != n_vocab) {
      fail("key '" + keys.key("vocab_size") + "' = " + std::to_string(n_vocab) + " but 'tokenizer.ggml.tokens' has " +
           std::to_string(tokens->count) + " tokens: expected them equal");
    }
    return n_vocab;
  }
  if (tokens != nullptr) {
    if (tokens->count == 0 || tokens->count > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      fail("key 'tokenizer.ggml.tokens': expected 1 to 2^31-1 tokens, got " + std::to_string(tokens->count));
    }
    return static_cast<uint32_t>(tokens->count);
  }
  // A file without a vocabulary (tests, bare weights): the embedding's row
  // count is the only statement of the vocabulary size.
  if (const TensorInfo* embd = file.find_tensor("token_embd.weight")) {
    if (embd->n_dims == 2 && embd->ne[1] >= 1 &&
        embd->ne[1] <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return static_cast<uint32_t>(embd->ne[1]);
    }
  }
  fail("cannot tell the vocabulary size: expected key '" + keys.key("vocab_size") +
       "' or 'tokenizer.ggml.tokens', found neither");
}

// Linear RoPE scaling is the only kind the graph implements; anything else
// would silently give wrong logits, so it is refused. As in llama.cpp, the
// factor applies whenever present and the type defaults to linear.
double read_linear_rope_scale(const GgufFile& file, const Keys& keys) {
  std::string type_key = keys.key("rope.scaling.type");
  std::string_view type = file.get_string(type_key, "linear");
  if (type != "none" && type != "linear") {
    fail("key '" + type_key + "': expected 'none' or 'linear', got '" + std::string(type) + "'");
  }
  const char* factor_key = keys.has("rope.scale_linear") ? "rope.scale_linear" : "rope.scaling.factor";
  double factor = keys.non_negative(factor_key);
  return factor == 0.0 ? 1.0 : 1.0 / factor;
}

}  // namespace

std::vector<bool> HParamKeys::sliding_layers(uint32_t n_layer, uint32_t default_period) const {
  std::vector<bool> sliding(n_layer, false);
  std::string pattern_key = key("attention.sliding_window_pattern");
  const GgufValue* pattern = file_.find(pattern_key);
  if (pattern != nullptr && pattern->type == GgufType::ARRAY) {
    const GgufArray* flags = pattern->as_array.get();
    if (flags->elem_type != GgufType::BOOL || flags->count != n_layer) {
      fail("key '" + pattern_key + "': expected an array of " + std::to_string(n_layer) +
           " bools, got " + std::to_string(flags->count) + " of type " +
           gguf_type_name(flags->elem_type));
    }
    for (uint32_t il = 0; il < n_layer; ++il) sliding[il] = flags->uint_at(il) != 0;
    return sliding;
  }
  // A period n makes layer il global when il % n == n - 1; 0 makes every layer local.
  uint32_t period = count("attention.sliding_window_pattern", 0, kMaxLayers, default_period);
  for (uint32_t il = 0; il < n_layer; ++il) sliding[il] = period == 0 || (il % period) < period - 1;
  return sliding;
}


bool HParams::has_sliding_layers() const {
  for (const auto& layer : layers) {
    if (layer.sliding) return true;
  }
  return false;
}

HParams HParams::from_gguf(const GgufFile& file) {
  // Before any size below is trusted: the file's data must fit the machine.
  check_model_memory(file);
  HParams hp;
  hp.arch_name = std::string(file.get_string("general.architecture"));
  find_arch(hp.arch_name);  // an unsupported architecture fails before any other key
  Keys keys(file, hp.arch_name);

  hp.n_embd = keys.count("embedding_length", 1, kMaxDim);
  hp.n_layer = keys.count("block_count", 1, kMaxLayers);
  hp.n_ff = keys.count("feed_forward_length", 1, kMaxDim);
  hp.n_ctx_train = keys.count("context_length", 1, std::numeric_limits<int32_t>::max());
  hp.n_head = keys.count("attention.head_count", 1, kMaxHeads);
  hp.n_head_kv = keys.count("attention.head_count_kv", 1, kMaxHeads, hp.n_head);
  if (hp.n_head % hp.n_head_kv != 0) {
    fail("key '" + keys.key("attention.head_count_kv") + "': expected a divisor of head_count " +
         std::to_string(hp.n_head) + ", got " + std::to_string(hp.n_head_kv));
  }
  uint32_t default_head_dim = hp.n_embd % hp.n_head == 0 ? hp.n_embd / hp.n_head : 0;
  if (default_head_dim == 0 && !keys.has("attention.key_length")) {
    fail("key '" + keys.key("attention.key_length") + "' is required when embedding_length " +
         std::to_string(hp.n_embd) + " is not a multiple of head_count " + std::to_string(hp.n_head));
  }
  hp.head_dim_k = keys.count("attention.key_length", 2, kMaxHeadDim, default_head_dim);
  hp.head_dim_v = keys.count("attention.value_length", 1, kMaxHeadDim, hp.head_dim_k);
  hp.n_rot = keys.count("rope.dimension_count", 2, hp.head_dim_k, hp.head_dim_k);
  if (hp.n_rot % 2 != 0) {
    fail("key '" + keys.key("rope.dimension_count") + "': expected an even number, got " +
         std::to_string(hp.n_rot));
  }
  hp.rms_eps = static_cast<float>(keys.positive("attention.layer_norm_rms_epsilon", 1e-5));
  hp.n_vocab = read_vocab_size(file, keys);
  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim_k));

  double rope_base = keys.positive("rope.freq_base", 10000.0);
  double rope_scale = read_linear_rope_scale(file, keys);
  hp.layers.assign(hp.n_layer, LayerAttention{false, rope_base, rope_scale});

  const ArchEntry& arch = find_arch(hp.arch_name);
  hp.family = arch.family;
  arch.factory.read_hparams(file, keys, hp);
  return hp;
}

}  // namespace muser
