#include "model/model.h"

#include "core/error.h"

namespace muser {

std::shared_ptr<const Model> Model::load(std::shared_ptr<const GgufFile> file) {
  if (!file) throw InternalError("[model] load: no file");
  auto model = std::make_shared<Model>();
  model->hparams = HParams::from_gguf(*file);
  model->weights = ModelWeights::bind(*file, model->hparams);
  model->file = std::move(file);
  return model;
}

}  // namespace muser
