// One architecture = one file in model/arch/: the GGUF keys it reads beyond
// the common ones, the tensors it binds, and the builder of one forward step
// (a StepGraph). Files register themselves (a static ArchRegistration) under
// their `general.architecture` names; nothing else names architectures.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"
#include "graph/weights.h"
#include "model/hparams.h"
#include "weights/gguf_file.h"

namespace muser {

class ArchModel {
 public:
  virtual ~ArchModel() = default;
  // Records the ops of one step of g.shape() (rows of any mix of sequences;
  // see graph/graph.h). Called once per shape class.
  virtual TensorId build_step(GraphBuilder& g) const = 0;
};

struct ArchFactory {
  // Reads the architecture's own keys (the common ones are in hp already;
  // `keys` reads "<arch>.<name>"), adjusting hp.
  void (*read_hparams)(const GgufFile& file, const HParamKeys& keys, HParams& hp);
  // Binds the tensors (ModelFormatError for a missing or misshapen one) and
  // returns the builder of this model's step graphs.
  std::unique_ptr<ArchModel> (*bind)(const GgufFile& file, const HParams& hp, WeightTable& weights);
};

struct ArchRegistration {
  // `names`: the general.architecture strings served; `family`: the name
  // reported in Engine.config["family"].
  ArchRegistration(std::vector<const char*> names, const char* family, ArchFactory factory);
};

struct ArchEntry {
  std::string name;
  std::string family;
  ArchFactory factory;
};

// The entry for `general_architecture`, or throws ModelFormatError naming it
// and listing the supported ones.
const ArchEntry& find_arch(std::string_view general_architecture);
// Comma-separated supported architecture strings, sorted.
std::string supported_arch_names();

}  // namespace muser
