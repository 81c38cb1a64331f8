// KvCache export/import for saved sessions (KvState::export_kv/import_kv).
// Kept apart from kv_cache.cpp: it only reads and writes rows through the
// same row addressing, so it ports with the cache layout unchanged.
#include <cstring>
#include <string>

#include "core/error.h"
#include "model/kv_cache.h"

namespace muser {

KvExport KvCache::export_kv(size_t n_past) const {
  if (n_past > max_context_ || !intact(n_past, n_past)) {
    throw InvalidArgument("[kv_cache] export_kv: positions before " + std::to_string(n_past) + " are not intact");
  }
  // Ring layers: the longest run of intact positions ending at n_past - 1.
  size_t ring_first = n_past;
  if (has_ring_) {
    while (ring_first > 0 && n_past - ring_first < ring_rows_ &&
           ring_position_[(ring_first - 1) % ring_rows_] == static_cast<int64_t>(ring_first - 1)) {
      --ring_first;
    }
  }
  KvExport out;
  out.n_past = n_past;
  out.layers.resize(layers_.size());
  for (uint32_t il = 0; il < layers_.size(); ++il) {
    KvExport::Layer& layer = out.layers[il];
    layer.ring = layers_[il].ring;
    layer.first_position = layer.ring ? ring_first : 0;
    layer.k_width = k_width_;
    layer.v_width = v_width_;
    const size_t rows = n_past - layer.first_position;
    layer.k.resize(rows * k_width_);
    layer.v.resize(rows * v_width_);
    for (size_t i = 0; i < rows; ++i) {
      const size_t p = layer.first_position + i;
      std::memcpy(layer.k.data() + i * k_width_, k_row(il, p), k_width_ * sizeof(uint16_t));
      std::memcpy(layer.v.data() + i * v_width_, v_row(il, p), v_width_ * sizeof(uint16_t));
    }
  }
  return out;
}

void KvCache::import_kv(const KvExport& data) {
  auto fail = [](const std::string& what) { throw InvalidArgument("[kv_cache] import_kv: " + what); };
  if (data.n_past > max_context_) {
    fail("n_past " + std::to_string(data.n_past) + " exceeds max_context " + std::to_string(max_context_));
  }
  if (data.layers.size() != layers_.size()) {
    fail("expected " + std::to_string(layers_.size()) + " layers, got " + std::to_string(data.layers.size()));
  }
  size_t ring_first = data.n_past;
  bool ring_seen = false;
  for (uint32_t il = 0; il < layers_.size(); ++il) {
    const KvExport::Layer& layer = data.layers[il];
    const std::string name = "layer " + std::to_string(il);
    if (layer.ring != layers_[il].ring) fail(name + ": sliding-window flag differs from the model's");
    if (layer.k_width != k_width_ || layer.v_width != v_width_) {
      fail(name + ": expected K/V widths " + std::to_string(k_width_) + "/" + std::to_string(v_width_) + ", got " +
           std::to_string(layer.k_width) + "/" + std::to_string(layer.v_width));
    }
    if (layer.first_position > data.n_past) fail(name + ": first_position past n_past");
    const size_t rows = data.n_past - layer.first_position;
    if (layer.k.size() != rows * k_width_ || layer.v.size() != rows * v_width_) {
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
  KvCache fresh(*this, 0);
  for (LayerPlanes& planes : fresh.layers_) {
    planes.k.clear();
    planes.v.clear();
  }
  fresh.global_intact_end_ = 0;
  if (fresh.has_ring_) fresh.ring_position_.assign(fresh.ring_rows_, -1);
  if (data.n_past > 0) fresh.grow(data.n_past);
  for (uint32_t il = 0; il < layers_.size(); ++il) {
    const KvExport::Layer& layer = data.layers[il];
    for (size_t p = layer.first_position; p < data.n_past; ++p) {
      const size_t i = p - layer.first_position;
      std::memcpy(fresh.k_row(il, p), layer.k.data() + i * k_width_, k_width_ * sizeof(uint16_t));
      std::memcpy(fresh.v_row(il, p), layer.v.data() + i * v_width_, v_width_ * sizeof(uint16_t));
    }
  }
  fresh.global_intact_end_ = data.n_past;
  if (fresh.has_ring_) {
    for (size_t p = ring_first; p < data.n_past; ++p) fresh.ring_position_[p % fresh.ring_rows_] = static_cast<int64_t>(p);
  }
  layers_ = std::move(fresh.layers_);
  global_intact_end_ = fresh.global_intact_end_;
  ring_position_ = std::move(fresh.ring_position_);
}

}  // namespace muser
