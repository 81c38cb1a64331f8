// The Metal backend's KV storage: per layer a K and a V plane of f16 rows,
// each one shared-storage Metal buffer that the attention and kv_store
// kernels address by plane row (kv/kv_state.h decides which row holds which
// position). Growing reallocates a plane and copies its rows through the
// shared mapping; capacity grows by half again each time, so a long
// sequence copies each row a bounded number of times.
#pragma once

#include <memory>
#include <vector>

#include "backend/metal/metal_device.h"
#include "kv/kv_layout.h"
#include "kv/kv_state.h"

namespace muser::metal {

class MetalKvStorage final : public KvStorage {
 public:
  MetalKvStorage(std::shared_ptr<MetalDevice> device, const KvLayout& layout);
  ~MetalKvStorage() override;
  MetalKvStorage(const MetalKvStorage&) = delete;
  MetalKvStorage& operator=(const MetalKvStorage&) = delete;

  std::unique_ptr<KvStorage> empty() const override;
  void read_row(uint32_t il, size_t row, uint16_t* k, uint16_t* v) const override;
  void write_row(uint32_t il, size_t row, const uint16_t* k, const uint16_t* v) override;
  void grow(size_t global_rows, size_t ring_rows) override;
  std::unique_ptr<KvStorage> clone(size_t global_rows) const override;
  size_t bytes() const override;

  struct Planes {
    DeviceBuffer k;  // rows x k_width f16
    DeviceBuffer v;  // rows x v_width f16
    size_t rows = 0;
  };
  const Planes& planes(uint32_t layer) const { return layers_[layer].planes; }
  const MetalDevice& device() const { return *device_; }

 private:
  struct Layer {
    bool ring = false;
    size_t k_width = 0, v_width = 0;
    Planes planes;
  };
  // Same layout, no rows (for empty() and clone()).
  std::unique_ptr<MetalKvStorage> same_layout() const;
  // Reallocates `layer` to `rows` rows, keeping its first `keep` rows.
  static void resize(MetalDevice& device, Layer& layer, size_t rows, size_t keep);

  std::shared_ptr<MetalDevice> device_;
  std::vector<Layer> layers_;
};

}  // namespace muser::metal
