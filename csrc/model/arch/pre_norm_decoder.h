// The llama-shaped decoder that several architectures are: per layer, an
// RMS-normed attention block and an RMS-normed SwiGLU feed-forward block,
// each added back into the residual stream. An architecture file that is
// this decoder plus a few extra tensors (biases, per-head norms) binds those
// in its LayerExtras hook and keeps only its keys and registration.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/arch/architecture.h"
#include "model/arch/blocks.h"

namespace muser {

struct PreNormLayer {
  uint32_t attn_norm = kNoWeight, ffn_norm = kNoWeight;
  AttentionWeights attn;
  FfnWeights ffn;
};

class PreNormDecoder final : public ArchModel {
 public:
  // Binds the tensors an architecture adds to layer il's attention (biases,
  // per-head norms); the common ones are bound already.
  using LayerExtras = std::function<void(WeightBinder& b, const HParams& hp, uint32_t il, AttentionWeights& attn)>;

  PreNormDecoder(const HParams& hp, WeightBinder& b, const LayerExtras& extras);
  TensorId build_step(GraphBuilder& g) const override;

 private:
  HParams hp_;
  HeadWeights head_;
  std::vector<PreNormLayer> layers_;
};

}  // namespace muser
