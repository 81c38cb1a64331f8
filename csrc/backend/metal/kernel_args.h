// Argument structs of the Metal kernels, shared by the host (C++ and
// Objective-C++) and the kernels in metal/*.metal, which bind them as
// `constant XxxArgs& args [[buffer(n)]]` and receive them through set_bytes.
//
// Plain structs of 32-bit fields only, so C++ and MSL lay them out
// identically; the static_asserts pin each size so a field added on one side
// only fails to build. Counts are elements unless named *_bytes; strides are
// in elements of the buffer's type.
#ifndef MUSER_BACKEND_METAL_KERNEL_ARGS_H
#define MUSER_BACKEND_METAL_KERNEL_ARGS_H

#if defined(__METAL_VERSION__)
#include <metal_stdlib>
#else
#include <cstdint>
#endif

#if !defined(__METAL_VERSION__)
namespace muser::metal {
#endif

// Threads per simdgroup every kernel is written for (Apple GPUs since A7).
#define MUSER_METAL_SIMD_WIDTH 32
// Activation rows one simdgroup of mul_mv_* carries at once: a decode group
// of 1..4 rows reads each weight row once.
#define MUSER_METAL_MATMUL_ROWS 4
// Elements one lane dequantizes at a time (a quarter of a 64-wide chunk);
// every supported row length is a multiple of it.
#define MUSER_METAL_CHUNK 16
// Largest head dimension the attention kernel holds in registers.
#define MUSER_METAL_MAX_HEAD_DIM 256

// y[r, o] = sum_i W[o, i] * x[r, i]; W rows of row_bytes bytes.
typedef struct {
  uint32_t n_in;          // elements per weight row (multiple of MUSER_METAL_CHUNK)
  uint32_t n_out;         // weight rows
  uint32_t n_rows;        // activation rows
  uint32_t row_bytes;     // bytes of one weight row
  uint32_t x_stride;      // floats between activation rows
  uint32_t y_stride;      // floats between output rows
  uint32_t simdgroups;    // simdgroups per threadgroup (outputs per threadgroup)
  uint32_t pad0;
} MatmulArgs;

// out[k, :] = dequantized row ids[k] of W.
typedef struct {
  uint32_t n_in;          // elements per row
  uint32_t n_table_rows;  // rows of W (ids outside are skipped; the host validates first)
  uint32_t row_bytes;
  uint32_t n_ids;
  uint32_t out_stride;
  uint32_t pad0, pad1, pad2;
} GetRowsArgs;

// out = x / sqrt(mean(x^2) + eps) * w, per group of n consecutive columns
// of each row (n_groups groups per row; one group = the whole row, or one
// head for per-head Q/K norms). w holds n floats shared by every group.
typedef struct {
  uint32_t n;             // columns per group
  uint32_t n_groups;      // groups per row
  uint32_t n_rows;
  uint32_t x_stride;
  uint32_t out_stride;
  float eps;
  uint32_t simdgroups;    // simdgroups per threadgroup (sizes the threadgroup memory)
  uint32_t has_weight;    // 0: no w (scale only)
} RmsNormArgs;

// In-place rotation of the first n_rot dims of each head; cos/sin per row
// come from the host (computed there in double, as the CPU backend does).
typedef struct {
  uint32_t n_heads;
  uint32_t head_dim;
  uint32_t n_rot;
  uint32_t neox;          // 0: pairs (2i, 2i+1); 1: pairs (i, i + n_rot/2)
  uint32_t n_rows;
  uint32_t x_stride;      // floats between rows
  uint32_t pad0, pad1;
} RopeArgs;

// KV plane row of position p: p % ring_rows for ring planes, else p.
typedef struct {
  uint32_t width;         // halves per KV row
  uint32_t n_rows;
  uint32_t start;         // position of source row 0
  uint32_t ring_rows;     // 0 for a growing (global) plane
  uint32_t src_stride;    // floats between source rows
  uint32_t pad0, pad1, pad2;
} KvStoreArgs;

// Attention of one query row and head over positions [first, last] of the
// row's KV (ranges per row in a uint2 buffer, built by the host from
// position, causal mask and sliding window).
typedef struct {
  uint32_t n_head;
  uint32_t n_head_kv;
  uint32_t head_dim_k;
  uint32_t head_dim_v;
  uint32_t n_rows;
  uint32_t q_stride;      // floats between query rows
  uint32_t out_stride;    // floats between output rows
  uint32_t k_row_width;   // halves per K plane row (all KV heads)
  uint32_t v_row_width;
  uint32_t ring_rows;     // 0 for a growing plane
  uint32_t simdgroups;    // simdgroups per threadgroup
  float scale;            // multiplies q.k
  float softcap;          // 0: none; else cap * tanh(score / cap) before the softmax
  uint32_t pad0, pad1, pad2;
} AttentionArgs;

// Element-wise kernels over rows: GLU, add, scale, softcap.
typedef struct {
  uint32_t n;             // elements per row
  uint32_t n_rows;
  uint32_t a_stride;      // gate / x / a
  uint32_t b_stride;      // up / b (0: every row reads row 0, a broadcast bias)
  uint32_t out_stride;
  float value;            // scale factor or softcap
  uint32_t pad0, pad1;
} ElementwiseArgs;

#if defined(__METAL_VERSION__) || defined(__cplusplus)
#define MUSER_ARGS_SIZE_IS(type, bytes) static_assert(sizeof(type) == (bytes), #type " size")
#else
#define MUSER_ARGS_SIZE_IS(type, bytes) _Static_assert(sizeof(type) == (bytes), #type " size")
#endif
MUSER_ARGS_SIZE_IS(MatmulArgs, 32);
MUSER_ARGS_SIZE_IS(GetRowsArgs, 32);
MUSER_ARGS_SIZE_IS(RmsNormArgs, 32);
MUSER_ARGS_SIZE_IS(RopeArgs, 32);
MUSER_ARGS_SIZE_IS(KvStoreArgs, 32);
MUSER_ARGS_SIZE_IS(AttentionArgs, 64);
MUSER_ARGS_SIZE_IS(ElementwiseArgs, 32);
#undef MUSER_ARGS_SIZE_IS

#if !defined(__METAL_VERSION__)
}  // namespace muser::metal
#endif

#endif  // MUSER_BACKEND_METAL_KERNEL_ARGS_H
