// A loaded model: the mapped GGUF file, its hyperparameters and its bound
// tensors. Immutable; shared by the engine, every backend and every session.
#pragma once

#include <memory>

#include "model/hparams.h"
#include "model/model_weights.h"
#include "weights/gguf_file.h"

namespace muser {

struct Model {
  std::shared_ptr<const GgufFile> file;  // owns the mapping every TensorInfo points into
  HParams hparams;
  ModelWeights weights;

  // Reads the hyperparameters and binds the tensors. Throws ModelFormatError.
  static std::shared_ptr<const Model> load(std::shared_ptr<const GgufFile> file);
};

}  // namespace muser
