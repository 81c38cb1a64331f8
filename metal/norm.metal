// RMSNorm, one threadgroup per (group, row): out = x / sqrt(mean(x^2) + eps) * w
// over the group's n columns.
// Threads sum squares over i = tid, tid + threads, ...; simd_sum per
// simdgroup; the simdgroup sums meet in threadgroup memory and every thread
// adds them in simdgroup order, so the scale is one fixed function of the
// group's values. Grid: (n_groups, n_rows, 1); threadgroup: simdgroups * 32 threads;
// threadgroup memory 0: simdgroups floats.
#include <metal_stdlib>

#include "backend/metal/kernel_args.h"

using namespace metal;

kernel void rms_norm_f32(device const float* x [[buffer(0)]], device const float* w [[buffer(1)]],
                         device float* out [[buffer(2)]], constant RmsNormArgs& args [[buffer(3)]],
                         threadgroup float* partial [[threadgroup(0)]],
                         uint3 group [[threadgroup_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint3 threads [[threads_per_threadgroup]],
                         uint simdgroup [[simdgroup_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]]) {
  const uint n_threads = threads.x;
  device const float* xr = x + ulong(group.y) * args.x_stride + ulong(group.x) * args.n;
  device float* yr = out + ulong(group.y) * args.out_stride + ulong(group.x) * args.n;
  float sum_sq = 0.0f;
  for (uint i = tid; i < args.n; i += n_threads) sum_sq += xr[i] * xr[i];
  sum_sq = simd_sum(sum_sq);
  if (lane == 0) partial[simdgroup] = sum_sq;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = 0.0f;
  for (uint g = 0; g < args.simdgroups; ++g) total += partial[g];
  const float mean = total / float(args.n);
  const float scale = 1.0f / sqrt(mean + args.eps);
  // In place (out == x) is safe: each thread rewrites only elements it read itself.
  for (uint i = tid; i < args.n; i += n_threads) yr[i] = args.has_weight != 0 ? (xr[i] * scale) * w[i] : xr[i] * scale;
}
