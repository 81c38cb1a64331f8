// The CPU's KV storage: per layer a K and a V plane of f16 rows in host
// memory, made of pages of kKvPageRows rows allocated as the sequence reaches
// them and never moved, so memory follows the sequence length without
// reallocation copies. Which position lives in which plane row is KvState's
// business (kv/kv_state.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_layout.h"
#include "kv/kv_state.h"

namespace muser::cpu {

// Rows per page of a KV plane: 64 rows of a 192-wide K row are 24 KiB.
constexpr size_t kKvPageRows = 64;

class CpuKvStorage final : public KvStorage {
 public:
  explicit CpuKvStorage(const KvLayout& layout);

  void grow(size_t global_rows, size_t ring_rows) override;
  std::unique_ptr<KvStorage> clone(size_t global_rows) const override;
  size_t bytes() const override;
  std::unique_ptr<KvStorage> empty() const override;
  void read_row(uint32_t il, size_t row, uint16_t* k, uint16_t* v) const override;
  void write_row(uint32_t il, size_t row, const uint16_t* k, const uint16_t* v) override;

  uint16_t* k_row(uint32_t il, size_t plane_row) { return row_in(layers_[il].k, plane_row, layers_[il].k_width); }
  uint16_t* v_row(uint32_t il, size_t plane_row) { return row_in(layers_[il].v, plane_row, layers_[il].v_width); }
  const uint16_t* k_row(uint32_t il, size_t plane_row) const {
    return row_in(layers_[il].k, plane_row, layers_[il].k_width);
  }
  const uint16_t* v_row(uint32_t il, size_t plane_row) const {
    return row_in(layers_[il].v, plane_row, layers_[il].v_width);
  }
  // Elements from one row of a plane to the next within a page.
  size_t k_width(uint32_t il) const { return layers_[il].k_width; }
  size_t v_width(uint32_t il) const { return layers_[il].v_width; }

 private:
  using Page = std::unique_ptr<uint16_t[]>;  // kKvPageRows rows
  struct LayerPlanes {
    bool ring = false;
    size_t k_width = 0, v_width = 0;
    std::vector<Page> k;
    std::vector<Page> v;
  };

  // A storage with this one's planes (ring flags, widths) and no pages.
  std::unique_ptr<CpuKvStorage> clone_layout() const;

  static uint16_t* row_in(const std::vector<Page>& pages, size_t r, size_t width) {
    return pages[r / kKvPageRows].get() + (r % kKvPageRows) * width;
  }

  std::vector<LayerPlanes> layers_;
};

// The rows of one layer of one sequence, as attention reads them.
struct KvPlanes {
  const CpuKvStorage* storage = nullptr;
  uint32_t layer = 0;
  size_t ring_rows = 0;  // 0: global layer (position p in row p)

  size_t row(size_t position) const { return ring_rows != 0 ? position % ring_rows : position; }
  const uint16_t* k(size_t position) const { return storage->k_row(layer, row(position)); }
  const uint16_t* v(size_t position) const { return storage->v_row(layer, row(position)); }
  // How many of the positions [position, position + limit) have rows that
  // follow each other in memory (one page, no ring wrap), k_stride() /
  // v_stride() elements apart.
  size_t run(size_t position, size_t limit) const {
    const size_t r = row(position);
    size_t n = kKvPageRows - r % kKvPageRows;
    if (ring_rows != 0 && ring_rows - r < n) n = ring_rows - r;
    return n < limit ? n : limit;
  }
  size_t k_stride() const { return storage->k_width(layer); }
  size_t v_stride() const { return storage->v_width(layer); }
};

}  // namespace muser::cpu
