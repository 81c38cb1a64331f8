// Rotary position embedding, in place on float32 rows of n_heads heads.
// The host supplies each row's cosines and sines (n_rot / 2 of each, cos
// first), computed in double as the CPU backend does, so the rotation itself
// is the only arithmetic here. Grid: (n_heads, n_rows, 1); threadgroup: 32.
#include <metal_stdlib>

#include "backend/metal/kernel_args.h"

using namespace metal;

kernel void rope_f32(device float* x [[buffer(0)]], device const float* cos_sin [[buffer(1)]],
                     constant RopeArgs& args [[buffer(2)]],
                     uint3 group [[threadgroup_position_in_grid]],
                     uint lane [[thread_index_in_simdgroup]]) {
  const uint half_rot = args.n_rot / 2;
  device float* head = x + ulong(group.y) * args.x_stride + ulong(group.x) * args.head_dim;
  device const float* cos_row = cos_sin + ulong(group.y) * args.n_rot;
  device const float* sin_row = cos_row + half_rot;
  for (uint i = lane; i < half_rot; i += MUSER_METAL_SIMD_WIDTH) {
    // Normal pairs neighbours; NEOX pairs dimension i with i + n_rot / 2.
    const uint a = args.neox != 0 ? i : 2 * i;
    const uint b = args.neox != 0 ? i + half_rot : 2 * i + 1;
    const float x0 = head[a];
    const float x1 = head[b];
    head[a] = x0 * cos_row[i] - x1 * sin_row[i];
    head[b] = x0 * sin_row[i] + x1 * cos_row[i];
  }
}
