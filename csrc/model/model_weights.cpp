#include "model/model_weights.h"

#include <string>

#include "core/error.h"

namespace muser {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw ModelFormatError(format_where("weights", what));
}

std::string shape_string(const uint64_t* dims, uint32_t n) {
  std::string s = "[";
  for (uint32_t i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

// Looks tensors up and checks them against the expected shape.
class Binder {
 public:
  explicit Binder(const GgufFile& file) : file_(file) {}

  // A matrix in ggml order: ne[0] = inputs, ne[1] = outputs. Any weight type.
  const TensorInfo* matrix(const std::string& name, uint64_t n_in, uint64_t n_out) const {
    const uint64_t dims[2] = {n_in, n_out};
    const TensorInfo* t = require(name, dims, 2);
    return t;
  }

  // A vector (norm weight, bias) the graph reads as floats.
  const TensorInfo* vector(const std::string& name, uint64_t n) const {
    const uint64_t dims[1] = {n};
    const TensorInfo* t = require(name, dims, 1);
    if (t->type != DType::F32 && t->type != DType::F16 && t->type != DType::BF16) {
      fail("tensor '" + name + "': expected type F32, F16 or BF16, got " +
           ggml_type_name(static_cast<uint32_t>(t->type)));
    }
    return t;
  }

  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

 private:
  const TensorInfo* require(const std::string& name, const uint64_t* dims, uint32_t n_dims) const {
    const TensorInfo* t = file_.find_tensor(name);
    if (t == nullptr) {
      fail("missing tensor '" + name + "': expected shape " + shape_string(dims, n_dims));
    }
    bool same = t->n_dims == n_dims;
    for (uint32_t i = 0; same && i < n_dims; ++i) same = t->ne[i] == dims[i];
    if (!same) {
      fail("tensor '" + name + "': expected shape " + shape_string(dims, n_dims) + ", got " +
           shape_string(t->ne.data(), t->n_dims));
    }
    return t;
  }

  const GgufFile& file_;
};

std::string layer_tensor(uint32_t il, const char* what) {
  return "blk." + std::to_string(il) + "." + what;
}

}  // namespace

ModelWeights ModelWeights::bind(const GgufFile& file, const HParams& hp) {
  Binder b(file);
  ModelWeights w;
  if (b.has("rope_freqs.weight")) w.rope_freqs = b.vector("rope_freqs.weight", hp.n_rot / 2);
  w.token_embd = b.matrix("token_embd.weight", hp.n_embd, hp.n_vocab);
  w.output_norm = b.vector("output_norm.weight", hp.n_embd);
  w.tied_output = !b.has("output.weight");
  w.output = w.tied_output ? w.token_embd : b.matrix("output.weight", hp.n_embd, hp.n_vocab);

  w.layers.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = w.layers[il];
    l.attn_norm = b.vector(layer_tensor(il, "attn_norm.weight"), hp.n_embd);
    l.attn_q = b.matrix(layer_tensor(il, "attn_q.weight"), hp.n_embd, hp.q_width());
    l.attn_k = b.matrix(layer_tensor(il, "attn_k.weight"), hp.n_embd, hp.k_width());
    l.attn_v = b.matrix(layer_tensor(il, "attn_v.weight"), hp.n_embd, hp.v_width());
    l.attn_output = b.matrix(layer_tensor(il, "attn_output.weight"), hp.attn_out_width(), hp.n_embd);
    if (hp.qkv_bias) {
      l.attn_q_bias = b.vector(layer_tensor(il, "attn_q.bias"), hp.q_width());
      l.attn_k_bias = b.vector(layer_tensor(il, "attn_k.bias"), hp.k_width());
      l.attn_v_bias = b.vector(layer_tensor(il, "attn_v.bias"), hp.v_width());
    }
    if (hp.qk_norm) {
      l.attn_q_norm = b.vector(layer_tensor(il, "attn_q_norm.weight"), hp.head_dim_k);
      l.attn_k_norm = b.vector(layer_tensor(il, "attn_k_norm.weight"), hp.head_dim_k);
    }
    l.ffn_norm = b.vector(layer_tensor(il, "ffn_norm.weight"), hp.n_embd);
    l.ffn_gate = b.matrix(layer_tensor(il, "ffn_gate.weight"), hp.n_embd, hp.n_ff);
    l.ffn_up = b.matrix(layer_tensor(il, "ffn_up.weight"), hp.n_embd, hp.n_ff);
    l.ffn_down = b.matrix(layer_tensor(il, "ffn_down.weight"), hp.n_ff, hp.n_embd);
    if (hp.post_norms) {
      l.post_attn_norm = b.vector(layer_tensor(il, "post_attention_norm.weight"), hp.n_embd);
      l.post_ffn_norm = b.vector(layer_tensor(il, "post_ffw_norm.weight"), hp.n_embd);
    }
  }
  return w;
}

}  // namespace muser
