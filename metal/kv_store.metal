// Writes float32 K or V rows of a forward into an f16 KV plane: source row r
// is position start + r, stored in plane row (start + r) % ring_rows for a
// sliding-window ring, else in row start + r. float -> half rounds to
// nearest even, the same bits as the CPU's fp32_to_fp16.
// Grid: (n_rows, 1, 1); threadgroup: 64 threads.
#include <metal_stdlib>

#include "backend/metal/kernel_args.h"

using namespace metal;

kernel void kv_store_f16(device const float* src [[buffer(0)]], device half* plane [[buffer(1)]],
                         constant KvStoreArgs& args [[buffer(2)]],
                         uint3 group [[threadgroup_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint3 threads [[threads_per_threadgroup]]) {
  const uint position = args.start + group.x;
  const uint row = args.ring_rows != 0 ? position % args.ring_rows : position;
  device const float* s = src + ulong(group.x) * args.src_stride;
  device half* d = plane + ulong(row) * args.width;
  for (uint i = tid; i < args.width; i += threads.x) d[i] = half(s[i]);
}
