// A sequence's KV: the bookkeeping every backend shares (which positions are
// intact, ring geometry, write tracking) around a backend's KvStorage (where
// the f16 rows live: host pages, device memory).
//
// Plane rows: layer il keeps position p in plane row p (global layer) or
// p % ring_rows (sliding-window layer). A KvStorage holds, per layer, a K
// plane and a V plane of f16 rows, as many as it was grown to.
//
// Positions are "intact" when every layer holds exactly what a forward of
// the sequence's history wrote there. begin_write() marks the positions
// about to be written as lost; end_write() marks them intact once every layer
// holds them, so a failed or partial write is never mistaken for data.
//
// Not thread-safe; owned by one session, written by one step at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_layout.h"

namespace muser {

// A backend-neutral copy of the positions a KV state holds (saved sessions).
// Per layer, the rows of positions [first_position, n_past) in position
// order, as f16 bits: K rows of k_width, V rows of v_width. Global layers
// start at 0; a sliding-window layer may start later (its ring no longer
// holds older positions, and no later query needs them). A storage that
// holds no rows (the null backend's) exports no layers.
struct KvExport {
  struct Layer {
    bool ring = false;
    size_t first_position = 0;
    size_t k_width = 0;
    size_t v_width = 0;
    std::vector<uint16_t> k;  // (n_past - first_position) x k_width
    std::vector<uint16_t> v;  // (n_past - first_position) x v_width
  };
  size_t n_past = 0;
  std::vector<Layer> layers;
};

// Where a backend keeps a sequence's KV rows.
class KvStorage {
 public:
  virtual ~KvStorage() = default;
  // False for a storage that keeps no rows at all (the null backend).
  virtual bool holds_rows() const { return true; }
  // An empty storage of the same layout (nothing grown yet).
  virtual std::unique_ptr<KvStorage> empty() const = 0;
  // Copies plane row `row` of layer il out of / into host f16 rows of the
  // layer's K and V widths (saved sessions; not on the forward path). The
  // row must exist (grown).
  virtual void read_row(uint32_t il, size_t row, uint16_t* k, uint16_t* v) const = 0;
  virtual void write_row(uint32_t il, size_t row, const uint16_t* k, const uint16_t* v) = 0;
  // Makes room for `global_rows` rows in every global plane and `ring_rows`
  // in every ring plane (never shrinks). Throws std::bad_alloc leaving every
  // existing row where and what it was.
  virtual void grow(size_t global_rows, size_t ring_rows) = 0;
  // A deep copy keeping the first `global_rows` rows of global planes and
  // every ring row.
  virtual std::unique_ptr<KvStorage> clone(size_t global_rows) const = 0;
  virtual size_t bytes() const = 0;
};

class KvState {
 public:
  // Throws InvalidArgument for max_context 0.
  KvState(const KvLayout& layout, size_t max_context, std::unique_ptr<KvStorage> storage);

  // Positions the state can ever hold (the session's context limit).
  size_t max_context() const { return max_context_; }
  // Whether queries at positions [first_query, end) find every key/value they
  // attend to among positions < end intact. intact(n, n) means "a forward can
  // resume at position n"; ring planes may have overwritten old positions, so
  // this can be false for an n far behind the newest write.
  bool intact(size_t first_query, size_t end) const;
  // Positions >= `position` stop being part of the sequence (truncate).
  void forget_from(size_t position) noexcept;
  // A deep copy (snapshot). Throws std::bad_alloc; never changes *this.
  std::unique_ptr<KvState> clone() const;
  // Bytes of memory held (storage and bookkeeping).
  size_t bytes() const;

  // Saved sessions (kv_state_io.cpp). export_kv copies what a forward
  // resuming at n_past needs (InvalidArgument unless intact(n_past, n_past));
  // import_kv replaces the whole state with such a copy, after which
  // intact(n_past, n_past) holds and a forward continues bitwise as from the
  // original. import_kv checks every count and width against this state's
  // layout and throws InvalidArgument naming the first mismatch, leaving
  // *this as it was.
  KvExport export_kv(size_t n_past) const;
  void import_kv(const KvExport& data);

  // Makes room for positions [start, start + n) (may throw std::bad_alloc,
  // leaving everything intact) and marks them lost until end_write.
  void begin_write(size_t start, size_t n);
  void end_write(size_t start, size_t n) noexcept;

  // The plane row of layer il that holds `position`.
  size_t plane_row(uint32_t il, size_t position) const {
    return layout_->layers[il].window != 0 ? position % ring_rows_ : position;
  }
  // Rows of this state's ring planes (0 when no layer slides).
  size_t ring_rows() const { return ring_rows_; }
  const KvLayout& layout() const { return *layout_; }
  KvStorage& storage() { return *storage_; }
  const KvStorage& storage() const { return *storage_; }

 private:
  KvState(const KvState& other, std::unique_ptr<KvStorage> storage);

  std::shared_ptr<const KvLayout> layout_;
  size_t max_context_;
  size_t window_;
  size_t ring_rows_;
  std::unique_ptr<KvStorage> storage_;
  // Global planes: positions [0, global_intact_end_) are intact.
  size_t global_intact_end_ = 0;
  // Ring planes: the position each ring row holds intact, or -1.
  std::vector<int64_t> ring_position_;
};

}  // namespace muser
