#include "engine/step_runner.h"

#include "core/error.h"
#include "engine/segment_checks.h"

namespace muser {

StepRunner::StepRunner(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend)
    : model_(std::move(model)), backend_(std::move(backend)) {
  if (!model_ || !backend_) throw InternalError("[engine] step runner needs a model and a backend");
  try {
    backend_->load_weights(model_->weights);
  } catch (const DeviceMemoryError& e) {
    throw DeviceMemoryError("[engine] model '" + model_->hparams.arch_name + "' (" + model_->file->path() +
                            ") does not fit on the " + backend_->name() + " device: " + e.what());
  }
}

std::unique_ptr<KvState> StepRunner::new_kv_state(size_t max_context) const {
  return std::make_unique<KvState>(model_->kv_layout, max_context, backend_->new_kv_storage(model_->kv_layout));
}

const StepGraph& StepRunner::graph_for(ShapeClass shape) {
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if ((*it)->shape == shape) {
      graphs_.splice(graphs_.begin(), graphs_, it);
      return *graphs_.front();
    }
  }
  graphs_.push_front(std::make_shared<const StepGraph>(model_->build_step(shape)));
  ++graphs_built_;
  if (graphs_.size() > kGraphCacheSize) graphs_.pop_back();
  return *graphs_.front();
}

void StepRunner::forward(const std::vector<ForwardSegment>& segments) {
  check_segments(segments, model_->hparams.n_vocab, backend_->name());

  // Everything that allocates happens before the first KV write.
  StepInputs& in = inputs_;
  in.tokens.clear();
  in.positions.clear();
  in.row_slot.clear();
  in.slots.clear();
  in.slot_writes.clear();
  in.output_rows.clear();
  in.outputs.clear();
  in.hidden.clear();
  bool hidden = false;
  for (const ForwardSegment& seg : segments) hidden = hidden || seg.hidden != nullptr;
  const size_t n_embd = model_->hparams.n_embd;
  for (size_t s = 0; s < segments.size(); ++s) {
    const ForwardSegment& seg = segments[s];
    for (size_t i = 0; i < seg.n_tokens; ++i) {
      if (hidden) in.hidden.push_back(seg.hidden != nullptr ? seg.hidden + i * n_embd : nullptr);
      in.tokens.push_back(seg.tokens[i]);
      in.positions.push_back(static_cast<int32_t>(seg.start + i));
      in.row_slot.push_back(static_cast<uint32_t>(s));
    }
    in.slots.push_back(seg.kv);
    in.slot_writes.push_back(!seg.replay);
    if (seg.logits != nullptr) {
      in.output_rows.push_back(static_cast<int32_t>(in.tokens.size() - 1));
      in.outputs.push_back(seg.logits);
    }
  }
  const StepGraph& graph = graph_for(ShapeClass{in.tokens.size(), in.outputs.size(), hidden});
  for (const ForwardSegment& seg : segments) {
    if (seg.replay) continue;
    try {
      seg.kv->begin_write(seg.start, seg.n_tokens);
    } catch (const DeviceMemoryError& e) {
      // Name what the user controls: the model, the sequence's context, the
      // number of sequences held (each slot or session keeps its own KV).
      throw DeviceMemoryError("[engine] model '" + model_->hparams.arch_name + "': out of " + backend_->name() +
                              " device memory growing a sequence's KV to " +
                              std::to_string(seg.start + seg.n_tokens) + " positions (its max_context is " +
                              std::to_string(seg.kv->max_context()) + "; every slot or session holds its own KV: "
                              "use fewer slots or a shorter max_context): " + e.what());
    }
  }
  backend_->execute(graph, in);
  for (const ForwardSegment& seg : segments) {
    if (!seg.replay) seg.kv->end_write(seg.start, seg.n_tokens);
  }
}

}  // namespace muser
