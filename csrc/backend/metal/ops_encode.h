// Op logic of the Metal backend in plain C++: for each op, which kernel of
// metal/*.metal runs, with which argument struct (kernel_args.h), grid and
// threadgroup size, and which buffer slices. Compiled everywhere; on Linux
// the emulator's encoder runs it against the same kernels.
//
// Every function validates shapes against the slices it is given and throws
// InvalidArgument ("[metal.<op>] ...: expected X, got Y") before encoding
// anything, so a bad shape never reaches a kernel.
//
// Exactness: each kernel computes a row of its output from that row's inputs
// alone, in a fixed order, so a row's result is bitwise the same whatever
// the other rows of the dispatch are (a decode row alone or in a group).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/metal/kernel_encoder.h"
#include "tensor/dtype.h"

namespace muser::metal {

// Simdgroups per threadgroup of the matmul, norm and attention kernels.
constexpr uint32_t kMatmulSimdgroups = 4;
constexpr uint32_t kNormSimdgroups = 8;
constexpr uint32_t kAttentionSimdgroups = 4;

// Threads per threadgroup the op logic dispatches at most; every pipeline
// must allow this many (checked when pipelines are built).
constexpr uint32_t kMaxThreadsPerThreadgroup = 256;

// Every kernel the op logic may dispatch, null-terminated (pipelines are
// built for all of them up front).
const char* const* kernel_names();

// Name of the mul_mv_* kernel for a weight type; throws InvalidArgument for a
// type the Metal kernels do not handle.
const char* matmul_kernel_name(DType type);
const char* get_rows_kernel_name(DType type);

// y[r, o] = sum_i W[o, i] x[r, i] for r < n_rows, o < n_out. W: n_out rows of
// row_bytes(type, n_in); x, y: float32 rows `x_stride` / `y_stride` apart.
void encode_matmul(KernelEncoder& enc, DType type, BufferSlice w, uint32_t n_in, uint32_t n_out, BufferSlice x,
                   uint32_t x_stride, uint32_t n_rows, BufferSlice y, uint32_t y_stride);

// out[k, :] = dequantized row ids[k] of a (n_table_rows, n_in) table. The ids
// buffer holds n_ids int32 values, each checked by the caller.
void encode_get_rows(KernelEncoder& enc, DType type, BufferSlice table, uint32_t n_in, uint32_t n_table_rows,
                     BufferSlice ids, uint32_t n_ids, BufferSlice out, uint32_t out_stride);

// RMSNorm of each group of n columns (n_groups groups per row; n_groups 1
// for whole rows). weight: n floats, or a slice without a buffer for none.
// out may be x.
void encode_rms_norm(KernelEncoder& enc, BufferSlice x, uint32_t x_stride, BufferSlice weight, uint32_t n,
                     uint32_t n_groups, uint32_t n_rows, float eps, BufferSlice out, uint32_t out_stride);

// In-place RoPE; cos_sin holds n_rows rows of n_rot floats (n_rot/2 cosines
// then n_rot/2 sines).
void encode_rope(KernelEncoder& enc, BufferSlice x, uint32_t x_stride, uint32_t n_rows, uint32_t n_heads,
                 uint32_t head_dim, uint32_t n_rot, bool neox, BufferSlice cos_sin);

// Converts n_rows float32 rows (positions start, start+1, ...) to f16 rows of
// a KV plane of plane_rows rows; ring_rows != 0 wraps positions modulo it.
void encode_kv_store(KernelEncoder& enc, BufferSlice src, uint32_t src_stride, uint32_t n_rows, uint32_t width,
                     uint32_t start, uint32_t ring_rows, BufferSlice plane, uint32_t plane_rows);

struct AttentionShape {
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t head_dim_k = 0;
  uint32_t head_dim_v = 0;
  uint32_t plane_rows = 0;   // rows of each KV plane
  uint32_t ring_rows = 0;    // 0 for a growing plane
  float scale = 1.0f;
  float softcap = 0.0f;
};

// out[r, h, :] = softmax over p in ranges[r] of (scale q[r,h].K[p]) V[p].
// ranges: n_rows (first, last) uint32 pairs, last < every position written.
void encode_attention(KernelEncoder& enc, const AttentionShape& shape, BufferSlice q, uint32_t q_stride,
                      uint32_t n_rows, BufferSlice k_plane, BufferSlice v_plane, BufferSlice ranges,
                      BufferSlice out, uint32_t out_stride);

enum class GluKind { SwiGlu, GeGlu };
void encode_glu(KernelEncoder& enc, GluKind kind, BufferSlice gate, uint32_t gate_stride, BufferSlice up,
                uint32_t up_stride, uint32_t n, uint32_t n_rows, BufferSlice out, uint32_t out_stride);

// out = a + b; b_stride 0 adds b's first row to every row (a bias).
void encode_add(KernelEncoder& enc, BufferSlice a, uint32_t a_stride, BufferSlice b, uint32_t b_stride, uint32_t n,
                uint32_t n_rows, BufferSlice out, uint32_t out_stride);
void encode_scale(KernelEncoder& enc, BufferSlice x, uint32_t x_stride, float factor, uint32_t n, uint32_t n_rows,
                  BufferSlice out, uint32_t out_stride);
// out(r, :) = x(r, :) for n columns (SliceCols: bind x at the slice's first column).
void encode_copy(KernelEncoder& enc, BufferSlice x, uint32_t x_stride, uint32_t n, uint32_t n_rows, BufferSlice out,
                 uint32_t out_stride);
void encode_softcap(KernelEncoder& enc, BufferSlice x, uint32_t x_stride, float cap, uint32_t n, uint32_t n_rows,
                    BufferSlice out, uint32_t out_stride);

}  // namespace muser::metal
