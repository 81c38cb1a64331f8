// A session's keys and values in device memory, f16, for the CUDA backend.
//
// Same geometry and bookkeeping as the CPU's KvCache (model/kv_cache.h):
// global layers hold position p in row p, sliding-window layers in row
// p % ring_rows with ring_rows = min(max_context, window + kMaxSegmentRows - 1);
// begin_write marks positions lost until end_write marks them intact.
// Unlike the CPU planes, all rows are allocated up front (one cudaMalloc),
// so a session either gets its whole context or fails at creation with a
// DeviceMemoryError that names the model and the context.
//
// Not thread-safe; owned by one session, written by one forward at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/device_buffer.h"

namespace muser::cuda {

struct KvGeometry {
  uint32_t n_layer = 0;
  size_t k_width = 0, v_width = 0;  // f16 elements per row
  size_t window = 0;                // sliding window (0: no layer slides)
  std::vector<bool> ring;           // per layer
  std::string model_name;           // for messages
};

class CudaKvState final : public KvState {
 public:
  CudaKvState(const KvGeometry& geometry, size_t max_context);

  size_t max_context() const override { return max_context_; }
  bool intact(size_t first_query, size_t end) const override;
  void forget_from(size_t position) noexcept override;
  std::unique_ptr<KvState> clone() const override;
  size_t bytes() const override { return planes_.bytes() + table_.bytes(); }

  void begin_write(size_t start, size_t n);
  void end_write(size_t start, size_t n) noexcept;

  // Device table of 2 * n_layer plane pointers (K planes, then V planes).
  const uint16_t* const* device_table() const { return table_.as<const uint16_t* const>(); }
  size_t ring_rows() const { return ring_rows_; }

  // Device bytes a state of this geometry takes for max_context positions.
  static size_t bytes_for(const KvGeometry& geometry, size_t max_context);

 private:
  KvGeometry geometry_;
  size_t max_context_;
  size_t ring_rows_ = 0;
  bool has_global_ = false, has_ring_ = false;
  DeviceBuffer planes_;
  DeviceBuffer table_;
  size_t global_intact_end_ = 0;
  std::vector<int64_t> ring_position_;
};

}  // namespace muser::cuda
