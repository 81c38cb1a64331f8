#include "backend/cpu/cpu_kv_storage.h"

#include <cstring>

namespace muser::cpu {

CpuKvStorage::CpuKvStorage(const KvLayout& layout) {
  layers_.resize(layout.layers.size());
  for (size_t il = 0; il < layers_.size(); ++il) {
    layers_[il].ring = layout.layers[il].window != 0;
    layers_[il].k_width = layout.layers[il].k_width;
    layers_[il].v_width = layout.layers[il].v_width;
  }
}

void CpuKvStorage::grow(size_t global_rows, size_t ring_rows) {
  // Pages are only ever added, and a plane's page count is its own, so
  // std::bad_alloc part-way leaves every existing row where it was.
  for (LayerPlanes& planes : layers_) {
    const size_t rows = planes.ring ? ring_rows : global_rows;
    const size_t needed = (rows + kKvPageRows - 1) / kKvPageRows;
    while (planes.k.size() < needed) planes.k.emplace_back(new uint16_t[kKvPageRows * planes.k_width]);
    while (planes.v.size() < needed) planes.v.emplace_back(new uint16_t[kKvPageRows * planes.v_width]);
  }
}

std::unique_ptr<KvStorage> CpuKvStorage::clone(size_t global_rows) const {
  auto copy_pages = [](const std::vector<Page>& from, size_t n_pages, size_t width) {
    std::vector<Page> to;
    to.reserve(n_pages);
    for (size_t i = 0; i < n_pages; ++i) {
      to.emplace_back(new uint16_t[kKvPageRows * width]);
      std::memcpy(to.back().get(), from[i].get(), kKvPageRows * width * sizeof(uint16_t));
    }
    return to;
  };
  const size_t global_pages = (global_rows + kKvPageRows - 1) / kKvPageRows;
  std::unique_ptr<CpuKvStorage> out = clone_layout();
  for (size_t il = 0; il < layers_.size(); ++il) {
    const LayerPlanes& from = layers_[il];
    LayerPlanes& to = out->layers_[il];
    const size_t n_pages = from.ring ? from.k.size() : std::min(from.k.size(), global_pages);
    to.k = copy_pages(from.k, n_pages, from.k_width);
    to.v = copy_pages(from.v, n_pages, from.v_width);
  }
  return out;
}

std::unique_ptr<KvStorage> CpuKvStorage::empty() const { return clone_layout(); }

std::unique_ptr<CpuKvStorage> CpuKvStorage::clone_layout() const {
  auto out = std::make_unique<CpuKvStorage>(KvLayout{});
  out->layers_.resize(layers_.size());
  for (size_t il = 0; il < layers_.size(); ++il) {
    out->layers_[il].ring = layers_[il].ring;
    out->layers_[il].k_width = layers_[il].k_width;
    out->layers_[il].v_width = layers_[il].v_width;
  }
  return out;
}

void CpuKvStorage::read_row(uint32_t il, size_t row, uint16_t* k, uint16_t* v) const {
  std::memcpy(k, k_row(il, row), layers_[il].k_width * sizeof(uint16_t));
  std::memcpy(v, v_row(il, row), layers_[il].v_width * sizeof(uint16_t));
}

void CpuKvStorage::write_row(uint32_t il, size_t row, const uint16_t* k, const uint16_t* v) {
  std::memcpy(k_row(il, row), k, layers_[il].k_width * sizeof(uint16_t));
  std::memcpy(v_row(il, row), v, layers_[il].v_width * sizeof(uint16_t));
}

size_t CpuKvStorage::bytes() const {
  size_t total = 0;
  for (const LayerPlanes& planes : layers_) {
    total += kKvPageRows * (planes.k.size() * planes.k_width + planes.v.size() * planes.v_width) * sizeof(uint16_t);
  }
  return total;
}

}  // namespace muser::cpu
