#include "backend/cuda/cuda_kv_storage.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"

namespace muser::cuda {
namespace {

size_t align256(size_t n) { return (n + 255) & ~static_cast<size_t>(255); }
// The first allocation holds this many rows, so short sessions grow rarely.
constexpr size_t kMinRows = 256;

}  // namespace

CudaKvStorage::CudaKvStorage(const KvLayout& layout) : layout_(layout) {
  table_ = DeviceBuffer(2 * layout_.layers.size() * sizeof(void*), "KV plane table");
}

size_t CudaKvStorage::plane_offset(uint32_t il, bool value, size_t global_cap, size_t ring_cap) const {
  size_t offset = 0;
  for (uint32_t l = 0; l < layout_.layers.size(); ++l) {
    const KvLayerDesc& d = layout_.layers[l];
    const size_t rows = d.window != 0 ? ring_cap : global_cap;
    if (l == il && !value) return offset;
    offset += align256(rows * d.k_width * 2);
    if (l == il) return offset;
    offset += align256(rows * d.v_width * 2);
  }
  return offset;
}

size_t CudaKvStorage::total_bytes(size_t global_cap, size_t ring_cap) const {
  return plane_offset(static_cast<uint32_t>(layout_.layers.size()), false, global_cap, ring_cap);
}

void CudaKvStorage::reallocate(size_t global_cap, size_t ring_cap, const CudaKvStorage& from, size_t keep_global,
                               size_t keep_ring) {
  const size_t total = total_bytes(global_cap, ring_cap);
  DeviceBuffer planes(total, "KV cache of one session (" + std::to_string(std::max(global_cap, ring_cap)) +
                                 " rows per plane, " + std::to_string((total + (1u << 20) - 1) >> 20) +
                                 " MiB): each session or slot holds its own; use fewer slots or a shorter "
                                 "max_context");
  std::vector<const uint16_t*> table(2 * layout_.layers.size());
  for (uint32_t il = 0; il < layout_.layers.size(); ++il) {
    const KvLayerDesc& d = layout_.layers[il];
    const bool ring = d.window != 0;
    uint8_t* k = planes.as<uint8_t>() + plane_offset(il, false, global_cap, ring_cap);
    uint8_t* v = planes.as<uint8_t>() + plane_offset(il, true, global_cap, ring_cap);
    table[il] = reinterpret_cast<const uint16_t*>(k);
    table[layout_.layers.size() + il] = reinterpret_cast<const uint16_t*>(v);
    const size_t keep = ring ? keep_ring : keep_global;
    if (keep > 0 && from.planes_.get() != nullptr) {
      const uint8_t* fk = from.planes_.as<uint8_t>() + from.plane_offset(il, false, from.global_cap_, from.ring_cap_);
      const uint8_t* fv = from.planes_.as<uint8_t>() + from.plane_offset(il, true, from.global_cap_, from.ring_cap_);
      check_cuda(cudaMemcpyAsync(k, fk, keep * d.k_width * 2, cudaMemcpyDeviceToDevice, 0), "copy KV rows");
      check_cuda(cudaMemcpyAsync(v, fv, keep * d.v_width * 2, cudaMemcpyDeviceToDevice, 0), "copy KV rows");
    }
  }
  check_cuda(cudaStreamSynchronize(0), "copy KV rows");
  copy_to_device(table_.get(), table.data(), table.size() * sizeof(void*), "KV plane table");
  planes_ = std::move(planes);
  global_cap_ = global_cap;
  ring_cap_ = ring_cap;
}

void CudaKvStorage::grow(size_t global_rows, size_t ring_rows) {
  const bool need_global = layout_.has_global() && global_rows > global_cap_;
  const bool need_ring = layout_.has_ring() && ring_rows > ring_cap_;
  if (!need_global && !need_ring) return;
  const size_t global_cap =
      need_global ? std::max({global_rows, 2 * global_cap_, kMinRows}) : global_cap_;
  const size_t ring_cap = need_ring ? std::max({ring_rows, 2 * ring_cap_, kMinRows}) : ring_cap_;
  reallocate(global_cap, ring_cap, *this, global_cap_, ring_cap_);
}

std::unique_ptr<KvStorage> CudaKvStorage::clone(size_t global_rows) const {
  auto copy = std::make_unique<CudaKvStorage>(layout_);
  const size_t keep_global = std::min(global_rows, global_cap_);
  if (global_cap_ + ring_cap_ > 0) {
    copy->reallocate(layout_.has_global() ? std::max(keep_global, kMinRows) : 0, ring_cap_, *this, keep_global,
                     ring_cap_);
  }
  return copy;
}

std::unique_ptr<KvStorage> CudaKvStorage::empty() const { return std::make_unique<CudaKvStorage>(layout_); }

uint8_t* CudaKvStorage::row_address(uint32_t il, bool value, size_t row) const {
  if (il >= layout_.layers.size()) throw InternalError("[cuda kv] layer " + std::to_string(il) + " out of range");
  const KvLayerDesc& d = layout_.layers[il];
  const size_t cap = d.window != 0 ? ring_cap_ : global_cap_;
  if (row >= cap) {
    throw InternalError("[cuda kv] plane row " + std::to_string(row) + " of layer " + std::to_string(il) +
                        " not grown: " + std::to_string(cap) + " rows held");
  }
  const size_t width = value ? d.v_width : d.k_width;
  return planes_.as<uint8_t>() + plane_offset(il, value, global_cap_, ring_cap_) + row * width * 2;
}

void CudaKvStorage::read_row(uint32_t il, size_t row, uint16_t* k, uint16_t* v) const {
  const KvLayerDesc& d = layout_.layers.at(il);
  check_cuda(cudaMemcpy(k, row_address(il, false, row), d.k_width * 2, cudaMemcpyDeviceToHost), "read KV row");
  check_cuda(cudaMemcpy(v, row_address(il, true, row), d.v_width * 2, cudaMemcpyDeviceToHost), "read KV row");
}

void CudaKvStorage::write_row(uint32_t il, size_t row, const uint16_t* k, const uint16_t* v) {
  const KvLayerDesc& d = layout_.layers.at(il);
  copy_to_device(row_address(il, false, row), k, d.k_width * 2, "write KV row");
  copy_to_device(row_address(il, true, row), v, d.v_width * 2, "write KV row");
}

}  // namespace muser::cuda
