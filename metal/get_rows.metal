// Embedding lookup for every weight type: out[k, :] = row ids[k] of W,
// dequantized. One simdgroup per id; lanes take 16-element chunks. Ids
// outside the table are skipped (the host rejects them before encoding; the
// check only keeps a bad id from reading outside the buffer).
// Grid: (n_ids, 1, 1); threadgroup: 32 threads.
#include <metal_stdlib>

#include "dequantize.h"

using namespace metal;

template <typename W>
void get_rows(device const uchar* w, device const int* ids, device float* out, constant GetRowsArgs& args,
              uint k, uint lane) {
  const int id = ids[k];
  if (id < 0 || uint(id) >= args.n_table_rows) return;
  device const uchar* row = w + ulong(id) * args.row_bytes;
  device float* dst = out + ulong(k) * args.out_stride;
  float chunk[MUSER_METAL_CHUNK];
  for (uint c = lane; c < args.n_in / MUSER_METAL_CHUNK; c += MUSER_METAL_SIMD_WIDTH) {
    W::chunk(row, c, chunk);
    for (uint i = 0; i < MUSER_METAL_CHUNK; ++i) dst[MUSER_METAL_CHUNK * c + i] = chunk[i];
  }
}

kernel void get_rows_f32(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                         device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                         uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightF32>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_f16(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                         device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                         uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightF16>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_bf16(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                          device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                          uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightBF16>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_q4_0(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                          device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                          uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightQ4_0>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_q4_1(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                          device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                          uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightQ4_1>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_q5_0(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                          device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                          uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightQ5_0>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_q5_1(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                          device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                          uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightQ5_1>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_q8_0(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                          device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                          uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightQ8_0>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_q2_k(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                          device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                          uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightQ2_K>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_q3_k(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                          device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                          uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightQ3_K>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_q4_k(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                          device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                          uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightQ4_K>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_q5_k(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                          device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                          uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightQ5_K>(w, ids, out, args, group.x, lane);
}

kernel void get_rows_q6_k(device const uchar* w [[buffer(0)]], device const int* ids [[buffer(1)]],
                          device float* out [[buffer(2)]], constant GetRowsArgs& args [[buffer(3)]],
                          uint3 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  get_rows<WeightQ6_K>(w, ids, out, args, group.x, lane);
}
