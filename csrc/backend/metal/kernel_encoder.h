// The seam between op logic and Metal: five calls, the shape of an
// MTLComputeCommandEncoder. Everything that decides *what* runs (kernel
// names, argument structs, grids, threadgroup sizes, buffer offsets) is plain
// C++ in ops_encode.cpp and talks only to this interface. Two
// implementations: metal_encoder.mm over a real MTLComputeCommandEncoder
// (Apple), and the emulator's (tests/metal_emulator/), which runs the same
// metal/*.metal kernels on the CPU under three thread orders.
//
// Bindings persist across dispatches, as in Metal. Not thread-safe: one
// encoder belongs to one command buffer being recorded by one thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace muser::metal {

struct GridSize {
  uint32_t x = 1, y = 1, z = 1;
};

// A device buffer as the op logic sees it: an opaque handle (an id<MTLBuffer>
// on Apple, host memory in the emulator) and its size, for bounds checks.
struct DeviceBuffer {
  void* handle = nullptr;
  size_t bytes = 0;
};

// Bytes [offset, buffer.bytes) of a buffer.
struct BufferSlice {
  DeviceBuffer buffer;
  size_t offset = 0;
};

class KernelEncoder {
 public:
  virtual ~KernelEncoder() = default;
  // Selects the kernel (function name in metal/*.metal) for the next dispatches.
  virtual void set_pipeline(const char* kernel_name) = 0;
  // Binds [[buffer(index)]] to buffer bytes from `offset`.
  virtual void set_buffer(uint32_t index, const DeviceBuffer& buffer, size_t offset) = 0;
  // Binds [[buffer(index)]] to a copy of n bytes (argument structs).
  virtual void set_bytes(uint32_t index, const void* bytes, size_t n) = 0;
  // Sizes [[threadgroup(index)]] memory: n bytes per threadgroup.
  virtual void set_threadgroup_memory(uint32_t index, size_t n) = 0;
  // dispatchThreadgroups:threadsPerThreadgroup:.
  virtual void dispatch(GridSize threadgroups, GridSize threads_per_threadgroup) = 0;
};

}  // namespace muser::metal
