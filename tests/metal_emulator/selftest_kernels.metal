// Deliberately broken and edge-case kernels that prove the emulator catches
// what it claims to (tests/backend/test_metal_emulator.py). Not part of the
// muser library: only the emulator test binary compiles this file.
#include <metal_stdlib>

using namespace metal;

// Reads a neighbour's threadgroup slot without a barrier: the result depends
// on the order threads run in.
kernel void selftest_missing_barrier(device float* out [[buffer(0)]], threadgroup float* slots [[threadgroup(0)]],
                                     uint tid [[thread_index_in_threadgroup]],
                                     uint3 threads [[threads_per_threadgroup]]) {
  slots[tid] = float(tid);
  out[tid] = slots[(tid + 1) % threads.x];
}

// The same with the barrier: every order gives out[i] = (i + 1) % n.
kernel void selftest_with_barrier(device float* out [[buffer(0)]], threadgroup float* slots [[threadgroup(0)]],
                                  uint tid [[thread_index_in_threadgroup]],
                                  uint3 threads [[threads_per_threadgroup]]) {
  slots[tid] = float(tid);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = slots[(tid + 1) % threads.x];
}

// Thread 0 returns before a barrier the others wait at.
kernel void selftest_barrier_after_return(device float* out [[buffer(0)]],
                                          uint tid [[thread_index_in_threadgroup]]) {
  if (tid == 0) return;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = 1.0f;
}

// Odd and even lanes call different simd functions.
kernel void selftest_simd_divergence(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]],
                                     uint tid [[thread_index_in_threadgroup]]) {
  out[tid] = lane % 2 == 1 ? simd_sum(1.0f) : simd_max(1.0f);
}

// Lanes >= 20 return first: simd_sum covers the 20 active lanes.
kernel void selftest_partial_simd_sum(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]],
                                      uint tid [[thread_index_in_threadgroup]]) {
  if (lane >= 20) return;
  out[tid] = simd_sum(float(lane));
}

// Writes one element past the buffer: AddressSanitizer reports this line.
kernel void selftest_out_of_bounds(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  out[tid + 1] = 1.0f;
}
