#include "emulator_encoder.h"

#include <cstring>
#include <string>

namespace mtlemu {

void EmulatorEncoder::set_pipeline(const char* kernel_name) {
  kernel_ = find_kernel(kernel_name);
  if (kernel_ == nullptr) throw EmulatorError(std::string("no kernel named ") + kernel_name + " in metal/*.metal");
}

void EmulatorEncoder::set_buffer(uint32_t index, const muser::metal::DeviceBuffer& buffer, size_t offset) {
  if (index >= kMaxBindings) throw EmulatorError("buffer index " + std::to_string(index) + " out of range");
  if (offset > buffer.bytes) throw EmulatorError("buffer offset past the end of the buffer");
  Bindings::Buffer& b = bindings_.buffers[index];
  b.data = static_cast<unsigned char*>(buffer.handle) + offset;
  b.bytes = buffer.bytes - offset;
  b.bound = true;
  b.inline_bytes = false;
}

void EmulatorEncoder::set_bytes(uint32_t index, const void* bytes, size_t n) {
  if (index >= kMaxBindings) throw EmulatorError("buffer index " + std::to_string(index) + " out of range");
  // Metal copies set_bytes data at encoding time; so do we.
  inline_bytes_[index].assign(static_cast<const unsigned char*>(bytes), static_cast<const unsigned char*>(bytes) + n);
  Bindings::Buffer& b = bindings_.buffers[index];
  b.data = inline_bytes_[index].data();
  b.bytes = n;
  b.bound = true;
  b.inline_bytes = true;
}

void EmulatorEncoder::set_threadgroup_memory(uint32_t index, size_t n) {
  if (index >= kMaxBindings) throw EmulatorError("threadgroup memory index out of range");
  // Apple GPUs give a threadgroup at most 32 KiB.
  if (n > 32 * 1024) throw EmulatorError("threadgroup memory of " + std::to_string(n) + " bytes exceeds 32 KiB");
  bindings_.threadgroup_bytes[index] = n;
  bindings_.threadgroup_set[index] = true;
}

void EmulatorEncoder::dispatch(muser::metal::GridSize groups, muser::metal::GridSize threads) {
  if (kernel_ == nullptr) throw EmulatorError("dispatch without set_pipeline");
  mtlemu::dispatch(*kernel_, bindings_, {groups.x, groups.y, groups.z}, {threads.x, threads.y, threads.z}, order_,
                   seed_ + dispatches_);
  ++dispatches_;
}

}  // namespace mtlemu
