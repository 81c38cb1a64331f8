// Matrix-vector products for every weight type: y[r, o] = W[o, :] . x[r, :].
//
// One simdgroup computes one output o for up to MUSER_METAL_MATMUL_ROWS
// activation rows, so a decode group of 1..4 rows reads each weight row once.
// Lanes take 16-element chunks c = lane, lane + 32, ...; each chunk's 16
// products are summed in order into the lane's accumulator of that row, and
// simd_sum combines the lanes. A row's arithmetic never depends on the other
// rows of its group, so a row's output is the same alone or in a group.
// Grid: (ceil(n_out / simdgroups), ceil(n_rows / 4)); threadgroup:
// simdgroups * 32 threads.
#include <metal_stdlib>

#include "dequantize.h"

using namespace metal;

template <typename W>
void mul_mv(device const uchar* w, device const float* x, device float* y, constant MatmulArgs& args, uint3 group,
            uint simdgroup, uint lane) {
  const uint o = group.x * args.simdgroups + simdgroup;
  if (o >= args.n_out) return;  // the whole simdgroup leaves together
  const uint first_row = group.y * MUSER_METAL_MATMUL_ROWS;
  const uint rows = min(uint(MUSER_METAL_MATMUL_ROWS), args.n_rows - first_row);
  device const uchar* w_row = w + ulong(o) * args.row_bytes;
  float acc[MUSER_METAL_MATMUL_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
  float chunk[MUSER_METAL_CHUNK];
  const uint n_chunks = args.n_in / MUSER_METAL_CHUNK;
  for (uint c = lane; c < n_chunks; c += MUSER_METAL_SIMD_WIDTH) {
    W::chunk(w_row, c, chunk);
    for (uint r = 0; r < rows; ++r) {
      device const float* xr = x + ulong(first_row + r) * args.x_stride + MUSER_METAL_CHUNK * c;
      float partial = 0.0f;
      for (uint i = 0; i < MUSER_METAL_CHUNK; ++i) partial += chunk[i] * xr[i];
      acc[r] += partial;
    }
  }
  for (uint r = 0; r < rows; ++r) {
    const float total = simd_sum(acc[r]);
    if (lane == 0) y[ulong(first_row + r) * args.y_stride + o] = total;
  }
}

kernel void mul_mv_f32(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                       device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                       uint3 group [[threadgroup_position_in_grid]],
                       uint simdgroup [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightF32>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_f16(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                       device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                       uint3 group [[threadgroup_position_in_grid]],
                       uint simdgroup [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightF16>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_bf16(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                        device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightBF16>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_q4_0(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                        device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightQ4_0>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_q4_1(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                        device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightQ4_1>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_q5_0(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                        device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightQ5_0>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_q5_1(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                        device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightQ5_1>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_q8_0(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                        device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightQ8_0>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_q2_k(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                        device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightQ2_K>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_q3_k(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                        device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightQ3_K>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_q4_k(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                        device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightQ4_K>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_q5_k(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                        device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightQ5_K>(w, x, y, args, group, simdgroup, lane);
}

kernel void mul_mv_q6_k(device const uchar* w [[buffer(0)]], device const float* x [[buffer(1)]],
                        device float* y [[buffer(2)]], constant MatmulArgs& args [[buffer(3)]],
                        uint3 group [[threadgroup_position_in_grid]],
                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  mul_mv<WeightQ6_K>(w, x, y, args, group, simdgroup, lane);
}
