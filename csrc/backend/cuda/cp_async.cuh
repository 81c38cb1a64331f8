// Asynchronous global -> shared memory copies (cp.async, compute capability
// 8.0 and later), for the kernels that stage their operands in shared memory
// while they compute on earlier ones: the tensor-core GEMM and the prefill
// attention.
#pragma once

namespace muser::cuda {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// Asynchronous global -> shared copies of 4 and 16 bytes to a
// shared-memory address (smem_addr); bytes past src_bytes (0..size) are not
// read and land as zeros.
__device__ __forceinline__ void cp_async4_to(unsigned dst, const void* src, unsigned src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async16_to(unsigned dst, const void* src, unsigned src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// The same to a pointer into shared memory.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, unsigned src_bytes) {
  cp_async4_to(smem_addr(dst), src, src_bytes);
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, unsigned src_bytes) {
  cp_async16_to(smem_addr(dst), src, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's committed groups are still
// in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace muser::cuda
