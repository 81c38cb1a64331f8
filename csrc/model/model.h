// A loaded model: the mapped GGUF file, its hyperparameters, the weights its
// graphs read, its KV layout and its architecture's step builder. Immutable;
// shared by the engine, its backend and every session.
#pragma once

#include <memory>

#include "graph/graph.h"
#include "graph/weights.h"
#include "kv/kv_layout.h"
#include "model/arch/architecture.h"
#include "model/hparams.h"
#include "weights/gguf_file.h"

namespace muser {

struct Model {
  std::shared_ptr<const GgufFile> file;  // owns the mapping every weight points into
  HParams hparams;
  WeightTable weights;
  KvLayout kv_layout;
  std::unique_ptr<ArchModel> arch;
  bool tied_output = false;  // the file has no output.weight

  // Reads the hyperparameters and binds the tensors. Throws ModelFormatError.
  static std::shared_ptr<const Model> load(std::shared_ptr<const GgufFile> file);

  // The step graph of one shape class.
  StepGraph build_step(ShapeClass shape) const;
};

}  // namespace muser
