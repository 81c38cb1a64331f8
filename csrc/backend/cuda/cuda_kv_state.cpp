#include "backend/cuda/cuda_kv_state.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"

namespace muser::cuda {
namespace {

size_t align256(size_t n) { return (n + 255) & ~static_cast<size_t>(255); }

size_t rows_of(const KvGeometry& g, bool ring, size_t max_context) {
  if (!ring) return max_context;
  return std::min(max_context, g.window + kMaxSegmentRows - 1);
}

}  // namespace

size_t CudaKvState::bytes_for(const KvGeometry& g, size_t max_context) {
  size_t total = 0;
  for (uint32_t il = 0; il < g.n_layer; ++il) {
    const size_t rows = rows_of(g, g.ring[il], max_context);
    total += align256(rows * g.k_width * 2) + align256(rows * g.v_width * 2);
  }
  return total;
}

CudaKvState::CudaKvState(const KvGeometry& geometry, size_t max_context)
    : geometry_(geometry), max_context_(max_context) {
  if (max_context == 0) throw InvalidArgument("[cuda kv] max_context: expected at least 1, got 0");
  for (uint32_t il = 0; il < geometry_.n_layer; ++il) {
    if (geometry_.ring[il]) {
      has_ring_ = true;
    } else {
      has_global_ = true;
    }
  }
  ring_rows_ = has_ring_ ? rows_of(geometry_, true, max_context) : 0;
  if (has_ring_) ring_position_.assign(ring_rows_, -1);
  const size_t total = bytes_for(geometry_, max_context);
  planes_ = DeviceBuffer(total, "KV cache of model '" + geometry_.model_name + "' for a session of max_context " +
                                    std::to_string(max_context) + " (each slot/session needs this much; use fewer "
                                    "slots or a shorter max_context)");
  std::vector<const uint16_t*> table(2 * geometry_.n_layer);
  size_t offset = 0;
  uint8_t* base = planes_.as<uint8_t>();
  for (uint32_t il = 0; il < geometry_.n_layer; ++il) {
    const size_t rows = rows_of(geometry_, geometry_.ring[il], max_context);
    table[il] = reinterpret_cast<const uint16_t*>(base + offset);
    offset += align256(rows * geometry_.k_width * 2);
    table[geometry_.n_layer + il] = reinterpret_cast<const uint16_t*>(base + offset);
    offset += align256(rows * geometry_.v_width * 2);
  }
  table_ = DeviceBuffer(table.size() * sizeof(const uint16_t*), "KV plane table");
  check_cuda(cudaMemcpy(table_.get(), table.data(), table.size() * sizeof(const uint16_t*), cudaMemcpyHostToDevice),
             "upload KV plane table");
}

void CudaKvState::begin_write(size_t start, size_t n) {
  if (n == 0 || start > max_context_ || n > max_context_ - start) {
    throw InternalError("[cuda kv] write of positions [" + std::to_string(start) + ", " + std::to_string(start + n) +
                        ") outside the context of " + std::to_string(max_context_));
  }
  global_intact_end_ = std::min(global_intact_end_, start);
  if (has_ring_) {
    for (size_t p = start; p < start + n; ++p) ring_position_[p % ring_rows_] = -1;
  }
}

void CudaKvState::end_write(size_t start, size_t n) noexcept {
  if (global_intact_end_ == start) global_intact_end_ = start + n;
  if (has_ring_) {
    for (size_t p = start; p < start + n; ++p) ring_position_[p % ring_rows_] = static_cast<int64_t>(p);
  }
}

bool CudaKvState::intact(size_t first_query, size_t end) const {
  if (end > max_context_ || first_query > end) return false;
  if (has_global_ && global_intact_end_ < end) return false;
  if (has_ring_) {
    const size_t lowest = first_query + 1 > geometry_.window ? first_query + 1 - geometry_.window : 0;
    for (size_t p = lowest; p < end; ++p) {
      if (ring_position_[p % ring_rows_] != static_cast<int64_t>(p)) return false;
    }
  }
  return true;
}

void CudaKvState::forget_from(size_t position) noexcept {
  global_intact_end_ = std::min(global_intact_end_, position);
  for (int64_t& held : ring_position_) {
    if (held >= static_cast<int64_t>(position)) held = -1;
  }
}

std::unique_ptr<KvState> CudaKvState::clone() const {
  auto copy = std::make_unique<CudaKvState>(geometry_, max_context_);
  // The backend's stream is idle between forwards (forward waits for it), so
  // a copy on the legacy stream sees every write; wait for it here.
  check_cuda(cudaMemcpyAsync(copy->planes_.get(), planes_.get(), planes_.bytes(), cudaMemcpyDeviceToDevice, 0),
             "copy KV planes");
  check_cuda(cudaStreamSynchronize(0), "copy KV planes");
  copy->global_intact_end_ = global_intact_end_;
  copy->ring_position_ = ring_position_;
  return copy;
}

}  // namespace muser::cuda
