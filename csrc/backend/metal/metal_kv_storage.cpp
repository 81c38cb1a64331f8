#include "backend/metal/metal_kv_storage.h"

#include <algorithm>
#include <cstring>

namespace muser::metal {

MetalKvStorage::MetalKvStorage(std::shared_ptr<MetalDevice> device, const KvLayout& layout)
    : device_(std::move(device)) {
  layers_.resize(layout.layers.size());
  for (size_t il = 0; il < layers_.size(); ++il) {
    layers_[il].ring = layout.layers[il].window != 0;
    layers_[il].k_width = layout.layers[il].k_width;
    layers_[il].v_width = layout.layers[il].v_width;
  }
}

MetalKvStorage::~MetalKvStorage() {
  for (Layer& layer : layers_) {
    device_->release_buffer(layer.planes.k);
    device_->release_buffer(layer.planes.v);
  }
}

void MetalKvStorage::resize(MetalDevice& device, Layer& layer, size_t rows, size_t keep) {
  // Both new planes exist before anything is released: on bad_alloc the
  // layer keeps its old planes untouched.
  DeviceBuffer k = device.new_buffer(rows * layer.k_width * 2);
  DeviceBuffer v;
  try {
    v = device.new_buffer(rows * layer.v_width * 2);
  } catch (...) {
    device.release_buffer(k);
    throw;
  }
  const size_t kept = std::min(keep, layer.planes.rows);
  if (kept > 0) {
    std::memcpy(device.contents(k), device.contents(layer.planes.k), kept * layer.k_width * 2);
    std::memcpy(device.contents(v), device.contents(layer.planes.v), kept * layer.v_width * 2);
  }
  device.release_buffer(layer.planes.k);
  device.release_buffer(layer.planes.v);
  layer.planes = Planes{k, v, rows};
}

void MetalKvStorage::grow(size_t global_rows, size_t ring_rows) {
  for (Layer& layer : layers_) {
    const size_t needed = layer.ring ? ring_rows : global_rows;
    if (needed <= layer.planes.rows) continue;
    // By half again (64 rows at least): KvState asks for rows as the sequence
    // reaches them, for ring planes too (up to the ring's size).
    const size_t rows = std::max({needed, layer.planes.rows + layer.planes.rows / 2, size_t{64}});
    resize(*device_, layer, rows, layer.planes.rows);
  }
}

std::unique_ptr<MetalKvStorage> MetalKvStorage::same_layout() const {
  auto copy = std::make_unique<MetalKvStorage>(device_, KvLayout{});
  copy->layers_.resize(layers_.size());
  for (size_t il = 0; il < layers_.size(); ++il) {
    copy->layers_[il].ring = layers_[il].ring;
    copy->layers_[il].k_width = layers_[il].k_width;
    copy->layers_[il].v_width = layers_[il].v_width;
  }
  return copy;
}

std::unique_ptr<KvStorage> MetalKvStorage::empty() const { return same_layout(); }

// Saved sessions only (not on the forward path): through the shared mapping,
// so no command buffer is needed; the engine never overlaps this with a step.
void MetalKvStorage::read_row(uint32_t il, size_t row, uint16_t* k, uint16_t* v) const {
  const Layer& layer = layers_[il];
  std::memcpy(k, static_cast<const uint16_t*>(device_->contents(layer.planes.k)) + row * layer.k_width,
              layer.k_width * sizeof(uint16_t));
  std::memcpy(v, static_cast<const uint16_t*>(device_->contents(layer.planes.v)) + row * layer.v_width,
              layer.v_width * sizeof(uint16_t));
}

void MetalKvStorage::write_row(uint32_t il, size_t row, const uint16_t* k, const uint16_t* v) {
  Layer& layer = layers_[il];
  std::memcpy(static_cast<uint16_t*>(device_->contents(layer.planes.k)) + row * layer.k_width, k,
              layer.k_width * sizeof(uint16_t));
  std::memcpy(static_cast<uint16_t*>(device_->contents(layer.planes.v)) + row * layer.v_width, v,
              layer.v_width * sizeof(uint16_t));
}

std::unique_ptr<KvStorage> MetalKvStorage::clone(size_t global_rows) const {
  std::unique_ptr<MetalKvStorage> copy = same_layout();
  for (size_t il = 0; il < layers_.size(); ++il) {
    const Layer& from = layers_[il];
    Layer& to = copy->layers_[il];
    const size_t rows = from.ring ? from.planes.rows : std::min(global_rows, from.planes.rows);
    if (rows == 0) continue;
    // Assigned one at a time so the copy's destructor frees whatever exists
    // if an allocation throws.
    to.planes.k = device_->new_buffer(rows * to.k_width * 2);
    to.planes.v = device_->new_buffer(rows * to.v_width * 2);
    to.planes.rows = rows;
    std::memcpy(device_->contents(to.planes.k), device_->contents(from.planes.k), rows * to.k_width * 2);
    std::memcpy(device_->contents(to.planes.v), device_->contents(from.planes.v), rows * to.v_width * 2);
  }
  return copy;
}

size_t MetalKvStorage::bytes() const {
  size_t total = 0;
  for (const Layer& layer : layers_) total += layer.planes.rows * (layer.k_width + layer.v_width) * 2;
  return total;
}

}  // namespace muser::metal
