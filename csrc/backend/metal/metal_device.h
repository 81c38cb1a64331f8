// The Metal objects the backend needs, behind plain C++: one device, the
// kernel library compiled from the embedded source, a pipeline per kernel
// name, the one command queue, shared-storage buffers, and command buffers
// with one compute encoder each. Implemented in metal_device.mm (Objective-C++,
// manual retain/release); on Linux the same .mm compiles against the
// emulator's fake Metal headers (tests/metal_emulator/fake_metal/).
//
// Buffers use shared storage (Apple silicon's unified memory): the host
// writes weights, inputs and KV rows through contents() and reads logits
// back after wait, with no blit passes.
//
// Thread safety: buffer creation and release may happen on any thread; one
// CommandBatch is recorded and committed by one thread (the engine
// serializes steps).
#pragma once

#include <memory>
#include <string>

#include "backend/metal/kernel_encoder.h"

namespace muser::metal {

// One command buffer with one compute encoder: a whole step (a decode group
// of 1..4 rows, or a prefill chunk) is encoded into it, committed once and
// waited for once.
class CommandBatch {
 public:
  virtual ~CommandBatch() = default;
  virtual KernelEncoder& encoder() = 0;
  // Ends encoding, commits and blocks until the GPU finished. Throws
  // InternalError with Metal's message if the command buffer failed.
  virtual void commit_and_wait() = 0;
};

class MetalDevice {
 public:
  virtual ~MetalDevice() = default;

  // "" when this machine has a Metal device, else why not.
  static std::string probe();
  // The default device with the kernel library compiled and every kernel's
  // pipeline created. Throws InvalidArgument when there is no device and
  // InternalError when the library or a pipeline fails to build.
  static std::unique_ptr<MetalDevice> open();

  virtual std::string name() const = 0;
  // A zero-filled shared buffer of `bytes` (> 0). Throws std::bad_alloc.
  virtual DeviceBuffer new_buffer(size_t bytes) = 0;
  // Releases a buffer from new_buffer (null handle: nothing).
  virtual void release_buffer(DeviceBuffer& buffer) noexcept = 0;
  // Host address of a buffer's first byte.
  virtual void* contents(const DeviceBuffer& buffer) const = 0;
  virtual std::unique_ptr<CommandBatch> begin_batch() = 0;
};

// The kernel source compiled into the extension (metal/*.metal with their
// includes inlined; generated at build time by tools/embed_metal_kernels.py).
const char* embedded_kernel_source();

}  // namespace muser::metal
