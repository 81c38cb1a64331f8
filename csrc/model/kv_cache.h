// A session's keys and values in host memory, f16: the KV state of the CPU
// backend (and of any backend that computes from host memory).
//
// One plane pair (K and V) per layer, rows indexed by position:
//   K plane: (rows, n_head_kv * head_dim_k) f16, V plane: (rows, n_head_kv * head_dim_v) f16
// - Global layers: growing planes; position p lives in row p. Rows are
//   allocated as the sequence grows (doubling), never past max_context.
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

class KvCache final : public KvState {
 public:
  KvCache(const HParams& hp, size_t max_context);

  size_t max_context() const override { return max_context_; }
  bool intact(size_t first_query, size_t end) const override;
  void forget_from(size_t position) noexcept override;
  std::unique_ptr<KvState> clone() const override;
  size_t bytes() const override;

  // Makes room for positions [start, start + n) (may throw std::bad_alloc,
  // leaving everything intact) and marks them lost until end_write.
  void begin_write(size_t start, size_t n);
  void end_write(size_t start, size_t n) noexcept;

  // Row of layer `il` holding `position` (the caller keeps to positions the
  // planes have room for: those of the current write or intact ones).
  uint16_t* k_row(uint32_t il, size_t position) { return layers_[il].k.data() + row(il, position) * k_width_; }
  uint16_t* v_row(uint32_t il, size_t position) { return layers_[il].v.data() + row(il, position) * v_width_; }
  const uint16_t* k_row(uint32_t il, size_t position) const {
    return layers_[il].k.data() + row(il, position) * k_width_;
  }
  const uint16_t* v_row(uint32_t il, size_t position) const {
    return layers_[il].v.data() + row(il, position) * v_width_;
  }

  bool is_ring(uint32_t il) const { return layers_[il].ring; }
  size_t ring_rows() const { return ring_rows_; }

 private:
  struct LayerPlanes {
    bool ring = false;
    std::vector<uint16_t> k;
    std::vector<uint16_t> v;
  };

  // Copy holding only the first global_keep_rows rows of each global plane.
  KvCache(const KvCache& other, size_t global_keep_rows);

  size_t row(uint32_t il, size_t position) const {
    return layers_[il].ring ? position % ring_rows_ : position;
  }
  // Rows a plane needs to hold positions < end.
  size_t rows_needed(bool ring, size_t end) const;
  void grow(size_t end);

  size_t max_context_;
  size_t k_width_;
  size_t v_width_;
  size_t window_;      // sliding window (0 when no layer slides)
  size_t ring_rows_;   // rows of a full ring (0 when no layer slides)
  size_t global_rows_ = 0;  // rows allocated in each global plane
  size_t ring_alloc_ = 0;   // rows allocated in each ring plane (grows up to ring_rows_)
  bool has_global_ = false;
  bool has_ring_ = false;
  std::vector<LayerPlanes> layers_;
  // Global planes: positions [0, global_intact_end_) are intact.
  size_t global_intact_end_ = 0;
  // Ring planes: the position each ring row holds intact, or -1.
  std::vector<int64_t> ring_position_;
};

}  // namespace muser
