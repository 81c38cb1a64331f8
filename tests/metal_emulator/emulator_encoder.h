// KernelEncoder over the emulator: the op logic of csrc/backend/metal/
// runs unchanged, its kernels execute on the CPU in the chosen thread order.
// DeviceBuffer.handle is the host address of the buffer's first byte.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/metal/kernel_encoder.h"
#include "emulator.h"

namespace mtlemu {

class EmulatorEncoder final : public muser::metal::KernelEncoder {
 public:
  EmulatorEncoder(Order order, uint64_t seed) : order_(order), seed_(seed) {}

  void set_pipeline(const char* kernel_name) override;
  void set_buffer(uint32_t index, const muser::metal::DeviceBuffer& buffer, size_t offset) override;
  void set_bytes(uint32_t index, const void* bytes, size_t n) override;
  void set_threadgroup_memory(uint32_t index, size_t n) override;
  void dispatch(muser::metal::GridSize threadgroups, muser::metal::GridSize threads) override;

  uint64_t dispatches() const { return dispatches_; }

 private:
  Order order_;
  uint64_t seed_;
  uint64_t dispatches_ = 0;
  const KernelInfo* kernel_ = nullptr;
  Bindings bindings_;
  std::vector<unsigned char> inline_bytes_[kMaxBindings];
};

}  // namespace mtlemu
