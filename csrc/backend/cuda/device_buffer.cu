#include "backend/cuda/device_buffer.h"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"

namespace muser::cuda {
namespace {

std::string mib(size_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

[[noreturn]] void allocation_failed(cudaError_t err, size_t bytes, const std::string& what, const char* kind) {
  cudaGetLastError();
  size_t free_bytes = 0, total_bytes = 0;
  device_memory(&free_bytes, &total_bytes);
  const std::string message = std::string("[cuda] ") + what + ": " + kind + " of " + mib(bytes) + " failed (" +
                              cudaGetErrorString(err) + "; device has " + mib(free_bytes) + " free of " +
                              mib(total_bytes) + ")";
  if (err == cudaErrorMemoryAllocation) throw DeviceMemoryError(message);
  throw InternalError(message);
}

}  // namespace

void copy_to_device(void* dst, const void* src, size_t bytes, const char* what) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), what);
  check_cuda(cudaStreamSynchronize(0), what);
}

void device_memory(size_t* free_bytes, size_t* total_bytes) {
  if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
    cudaGetLastError();
    *free_bytes = 0;
    *total_bytes = 0;
  }
}

DeviceBuffer::DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    ptr_ = nullptr;
    allocation_failed(err, bytes, what, "cudaMalloc");
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.ptr_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

PinnedBuffer::PinnedBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  if (bytes == 0) return;
  // Portable: page-locked for every context, whichever thread allocates
  // (sessions are made on any thread).
  const cudaError_t err = cudaHostAlloc(&ptr_, bytes, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    ptr_ = nullptr;
    allocation_failed(err, bytes, what, "cudaHostAlloc");
  }
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.ptr_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

}  // namespace muser::cuda
