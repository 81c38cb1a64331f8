// A session's keys and values in host memory, f16: the KV state of the CPU
// backend (and of any backend that computes from host memory).
//
// One plane pair (K and V) per layer, rows indexed by position:
//   K plane: (rows, n_head_kv * head_dim_k) f16, V plane: (rows, n_head_kv * head_dim_v) f16
// Planes are made of pages of kKvPageRows rows, allocated as the sequence
// reaches them and never moved, so memory follows the sequence length
// without reallocation copies.
// - Global layers: growing planes; position p lives in row p (up to max_context).
// - Sliding-window layers: ring planes of window + kMaxSegmentRows - 1 rows
//   (at most max_context); position p lives in row p % ring_rows. The extra
//   kMaxSegmentRows - 1 rows let every row of a segment see its full window
//   while the segment writes its own keys.
//
// Validity is tracked so that a failed or partial write is never mistaken
// for data: begin_write() marks the positions about to be written as lost,
// end_write() marks them intact once every layer holds them.
//
// Not thread-safe; owned by one session, written by one forward at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/hparams.h"

namespace muser {

// Rows per page of a KV plane: 64 rows of a 192-wide K row are 24 KiB.
constexpr size_t kKvPageRows = 64;

class KvCache final : public KvState {
 public:
  KvCache(const HParams& hp, size_t max_context);

  size_t max_context() const override { return max_context_; }
  bool intact(size_t first_query, size_t end) const override;
  void forget_from(size_t position) noexcept override;
  std::unique_ptr<KvState> clone() const override;
  size_t bytes() const override;
  KvExport export_kv(size_t n_past) const override;  // kv_cache_io.cpp
  void import_kv(const KvExport& data) override;      // kv_cache_io.cpp

  // Makes room for positions [start, start + n) (may throw std::bad_alloc,
  // leaving everything intact) and marks them lost until end_write.
  void begin_write(size_t start, size_t n);
  void end_write(size_t start, size_t n) noexcept;

  // Row of layer `il` holding `position` (the caller keeps to positions the
  // planes have room for: those of the current write or intact ones).
  uint16_t* k_row(uint32_t il, size_t position) { return row_in(layers_[il].k, il, position, k_width_); }
  uint16_t* v_row(uint32_t il, size_t position) { return row_in(layers_[il].v, il, position, v_width_); }
  const uint16_t* k_row(uint32_t il, size_t position) const {
    return row_in(layers_[il].k, il, position, k_width_);
  }
  const uint16_t* v_row(uint32_t il, size_t position) const {
    return row_in(layers_[il].v, il, position, v_width_);
  }

  bool is_ring(uint32_t il) const { return layers_[il].ring; }
  size_t ring_rows() const { return ring_rows_; }

 private:
  using Page = std::unique_ptr<uint16_t[]>;  // kKvPageRows rows
  struct LayerPlanes {
    bool ring = false;
    std::vector<Page> k;
    std::vector<Page> v;
  };

  // Copy holding only the first global_keep_pages pages of each global plane.
  KvCache(const KvCache& other, size_t global_keep_pages);

  size_t row(uint32_t il, size_t position) const {
    return layers_[il].ring ? position % ring_rows_ : position;
  }
  uint16_t* row_in(const std::vector<Page>& pages, uint32_t il, size_t position, size_t width) const {
    const size_t r = row(il, position);
    return pages[r / kKvPageRows].get() + (r % kKvPageRows) * width;
  }
  // Pages a plane needs to hold positions < end.
  size_t pages_needed(bool ring, size_t end) const;
  void grow(size_t end);

  size_t max_context_;
  size_t k_width_;
  size_t v_width_;
  size_t window_;      // sliding window (0 when no layer slides)
  size_t ring_rows_;   // rows of a full ring (0 when no layer slides)
  bool has_global_ = false;
  bool has_ring_ = false;
  std::vector<LayerPlanes> layers_;
  // Global planes: positions [0, global_intact_end_) are intact.
  size_t global_intact_end_ = 0;
  // Ring planes: the position each ring row holds intact, or -1.
  std::vector<int64_t> ring_position_;
};

}  // namespace muser
