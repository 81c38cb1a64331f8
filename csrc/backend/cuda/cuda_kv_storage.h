// The CUDA backend's KV storage: per layer a K and a V plane of f16 rows in
// device memory, in one allocation that grows (by doubling, with a copy of
// the rows held) as KvState asks for more rows. Which position lives in which
// plane row is KvState's business (kv/kv_state.h); this class holds bytes.
//
// A device table of 2 * n_layer plane pointers (K planes, then V planes)
// stays at one address for the storage's life and is rewritten when the
// planes move, so kernels and captured CUDA graphs reach the rows through it.
// grow() and clone() run between steps (the backend's stream is idle then).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "kv/kv_layout.h"
#include "kv/kv_state.h"

namespace muser::cuda {

class CudaKvStorage final : public KvStorage {
 public:
  explicit CudaKvStorage(const KvLayout& layout);

  // Throws DeviceMemoryError (a MemoryError in Python) when the device is
  // full, leaving every row where it was.
  void grow(size_t global_rows, size_t ring_rows) override;
  std::unique_ptr<KvStorage> clone(size_t global_rows) const override;
  std::unique_ptr<KvStorage> empty() const override;
  // Saved sessions only (one synchronous copy per plane row; never on the
  // forward path).
  void read_row(uint32_t il, size_t row, uint16_t* k, uint16_t* v) const override;
  void write_row(uint32_t il, size_t row, const uint16_t* k, const uint16_t* v) override;
  size_t bytes() const override { return planes_.bytes() + table_.bytes(); }

  const uint16_t* const* device_table() const { return table_.as<const uint16_t* const>(); }

 private:
  // Moves the planes into a new allocation of the given capacities, copying
  // the first keep_global global rows and keep_ring ring rows of `from`.
  void reallocate(size_t global_cap, size_t ring_cap, const CudaKvStorage& from, size_t keep_global,
                  size_t keep_ring);
  size_t plane_offset(uint32_t il, bool value, size_t global_cap, size_t ring_cap) const;
  size_t total_bytes(size_t global_cap, size_t ring_cap) const;
  // Device addresses of plane row `row` of layer il; InternalError when the
  // row was never grown.
  uint8_t* row_address(uint32_t il, bool value, size_t row) const;

  KvLayout layout_;
  size_t global_cap_ = 0, ring_cap_ = 0;
  DeviceBuffer planes_;
  DeviceBuffer table_;
};

}  // namespace muser::cuda
