#include "model/model.h"

#include "core/error.h"

namespace muser {

std::shared_ptr<const Model> Model::load(std::shared_ptr<const GgufFile> file) {
  if (!file) throw InternalError("[model] load: no file");
  auto model = std::make_shared<Model>();
  model->hparams = HParams::from_gguf(*file);
  const HParams& hp = model->hparams;
  model->arch = find_arch(hp.arch_name).factory.bind(*file, hp, model->weights);
  model->tied_output = file->find_tensor("output.weight") == nullptr;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    model->kv_layout.layers.push_back(
        KvLayerDesc{hp.k_width(), hp.v_width(), hp.layers[il].sliding ? size_t{hp.sliding_window} : 0});
  }
  model->file = std::move(file);
  return model;
}

StepGraph Model::build_step(ShapeClass shape) const {
  GraphBuilder g(weights, shape);
  const TensorId logits = arch->build_step(g);
  return g.finish(logits);
}

}  // namespace muser
