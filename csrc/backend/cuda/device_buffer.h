// Owning handles for device and pinned host memory. Allocation failures
// throw DeviceMemoryError naming `what`; frees never throw.
#pragma once

#include <cstddef>
#include <string>

namespace muser::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `what` names the allocation for the out-of-memory message.
  DeviceBuffer(size_t bytes, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
    other.ptr_ = nullptr;
    other.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  // Gives up ownership: the caller cudaFree()s the returned pointer.
  void* release() noexcept {
    void* p = ptr_;
    ptr_ = nullptr;
    bytes_ = 0;
    return p;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(size_t bytes, const std::string& what);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
    other.ptr_ = nullptr;
    other.bytes_ = 0;
  }
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  // Gives up ownership: the caller cudaFreeHost()s the returned pointer.
  void* release() noexcept {
    void* p = ptr_;
    ptr_ = nullptr;
    bytes_ = 0;
    return p;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Copies host bytes to the device and returns once they are there. A plain
// cudaMemcpy from pageable memory may return while the last DMA is still in
// flight, and kernels on a non-blocking stream (every stream of this
// backend) do not wait for it: they could read half-copied weights or a
// stale KV plane table. Waiting on the legacy stream, which carries that DMA,
// closes the gap. `what` names the copy in error messages.
void copy_to_device(void* dst, const void* src, size_t bytes, const char* what);

// Device memory free and total, in bytes (for messages).
void device_memory(size_t* free_bytes, size_t* total_bytes);

}  // namespace muser::cuda
