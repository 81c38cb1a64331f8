// llama (and mistral, SmolLM2): pre-norm decoder, RoPE on neighbouring
// pairs, SwiGLU feed-forward.
#include "model/arch/architecture.h"
#include "model/arch/pre_norm_decoder.h"

namespace muser {
namespace {

void read_hparams(const GgufFile&, const HParamKeys&, HParams& hp) { hp.rope_style = RopeStyle::Normal; }

std::unique_ptr<ArchModel> bind(const GgufFile& file, const HParams& hp, WeightTable& weights) {
  WeightBinder b(file, weights);
  return std::make_unique<PreNormDecoder>(hp, b, PreNormDecoder::LayerExtras{});
}

// "mistral" files written by older converters use the llama graph with their
// own key prefix.
const ArchRegistration registration({"llama", "mistral"}, "llama", ArchFactory{read_hparams, bind});

}  // namespace
}  // namespace muser
