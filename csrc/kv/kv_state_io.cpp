// KvState export/import for saved sessions: the bookkeeping decides which
// positions travel; the storage only copies rows in and out.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "kv/kv_state.h"

namespace muser {

KvExport KvState::export_kv(size_t n_past) const {
  if (n_past > max_context_ || !intact(n_past, n_past)) {
    throw InvalidArgument("[kv_cache] export_kv: positions before " + std::to_string(n_past) + " are not intact");
  }
  KvExport out;
  out.n_past = n_past;
  if (!storage_->holds_rows()) return out;
  // Ring layers: the longest run of intact positions ending at n_past - 1.
  size_t ring_first = n_past;
  if (!ring_position_.empty()) {
    while (ring_first > 0 && n_past - ring_first < ring_rows_ &&
           ring_position_[(ring_first - 1) % ring_rows_] == static_cast<int64_t>(ring_first - 1)) {
      --ring_first;
    }
  }
  const KvLayout& layout = *layout_;
  out.layers.resize(layout.layers.size());
  for (uint32_t il = 0; il < layout.layers.size(); ++il) {
    const KvLayerDesc& desc = layout.layers[il];
    KvExport::Layer& layer = out.layers[il];
    layer.ring = desc.window != 0;
    layer.first_position = layer.ring ? ring_first : 0;
    layer.k_width = desc.k_width;
    layer.v_width = desc.v_width;
    const size_t rows = n_past - layer.first_position;
    layer.k.resize(rows * desc.k_width);
    layer.v.resize(rows * desc.v_width);
    for (size_t i = 0; i < rows; ++i) {
      storage_->read_row(il, plane_row(il, layer.first_position + i), layer.k.data() + i * desc.k_width,
                         layer.v.data() + i * desc.v_width);
    }
  }
  return out;
}

void KvState::import_kv(const KvExport& data) {
  auto fail = [](const std::string& what) { throw InvalidArgument("[kv_cache] import_kv: " + what); };
  if (data.n_past > max_context_) {
    fail("n_past " + std::to_string(data.n_past) + " exceeds max_context " + std::to_string(max_context_));
  }
  const KvLayout& layout = *layout_;
  const size_t n_layers = storage_->holds_rows() ? layout.layers.size() : 0;
  if (data.layers.size() != n_layers) {
    fail("expected " + std::to_string(n_layers) + " layers, got " + std::to_string(data.layers.size()));
  }
  size_t ring_first = data.n_past;
  bool ring_seen = false;
  for (uint32_t il = 0; il < n_layers; ++il) {
    const KvExport::Layer& layer = data.layers[il];
    const KvLayerDesc& desc = layout.layers[il];
    const std::string name = "layer " + std::to_string(il);
    if (layer.ring != (desc.window != 0)) fail(name + ": sliding-window flag differs from the model's");
    if (layer.k_width != desc.k_width || layer.v_width != desc.v_width) {
      fail(name + ": expected K/V widths " + std::to_string(desc.k_width) + "/" + std::to_string(desc.v_width) +
           ", got " + std::to_string(layer.k_width) + "/" + std::to_string(layer.v_width));
    }
    if (layer.first_position > data.n_past) fail(name + ": first_position past n_past");
    const size_t rows = data.n_past - layer.first_position;
    if (layer.k.size() != rows * desc.k_width || layer.v.size() != rows * desc.v_width) {
      fail(name + ": expected " + std::to_string(rows) + " rows of K and V");
    }
    if (!layer.ring && layer.first_position != 0) fail(name + ": a global layer must start at position 0");
    if (layer.ring) {
      if (rows > ring_rows_) fail(name + ": more rows than the ring holds");
      if (ring_seen && layer.first_position != ring_first) fail(name + ": ring layers start at different positions");
      ring_first = layer.first_position;
      ring_seen = true;
    }
  }
  // Built aside and swapped in whole, so a failure leaves *this unchanged.
  std::unique_ptr<KvStorage> fresh = storage_->empty();
  if (data.n_past > 0) fresh->grow(data.n_past, std::min(data.n_past, ring_rows_));
  for (uint32_t il = 0; il < n_layers; ++il) {
    const KvExport::Layer& layer = data.layers[il];
    const KvLayerDesc& desc = layout.layers[il];
    for (size_t p = layer.first_position; p < data.n_past; ++p) {
      const size_t i = p - layer.first_position;
      fresh->write_row(il, plane_row(il, p), layer.k.data() + i * desc.k_width, layer.v.data() + i * desc.v_width);
    }
  }
  std::vector<int64_t> ring(ring_position_.size(), -1);
  // A state with no rows (null) keeps its ring bookkeeping from n_past back.
  if (!ring.empty()) {
    const size_t first = n_layers > 0 ? ring_first : (data.n_past > ring_rows_ ? data.n_past - ring_rows_ : 0);
    for (size_t p = first; p < data.n_past; ++p) ring[p % ring_rows_] = static_cast<int64_t>(p);
  }
  storage_ = std::move(fresh);
  global_intact_end_ = data.n_past;
  ring_position_ = std::move(ring);
}

}  // namespace muser
