#include "backend/metal/ops_encode.h"

#include <algorithm>
#include <string>

#include "backend/metal/kernel_args.h"
#include "core/error.h"

namespace muser::metal {
namespace {

constexpr uint32_t kSimd = MUSER_METAL_SIMD_WIDTH;
constexpr uint32_t kElementwiseThreads = 256;

[[noreturn]] void bad(const char* op, const std::string& what) {
  throw InvalidArgument(std::string("[metal.") + op + "] " + what);
}

void require_positive(const char* op, const char* name, uint64_t value) {
  if (value == 0) bad(op, std::string(name) + ": expected > 0, got 0");
}

// The slice must hold `bytes` bytes from its offset.
void require_bytes(const char* op, const char* name, const BufferSlice& s, uint64_t bytes) {
  if (s.buffer.handle == nullptr) bad(op, std::string(name) + ": no buffer");
  if (s.offset > s.buffer.bytes || s.buffer.bytes - s.offset < bytes) {
    bad(op, std::string(name) + ": expected at least " + std::to_string(bytes) + " bytes from offset " +
                std::to_string(s.offset) + ", buffer has " + std::to_string(s.buffer.bytes));
  }
}

// Bytes spanned by n_rows rows of n elements of `elem` bytes, stride apart.
uint64_t rows_bytes(uint32_t n_rows, uint32_t stride, uint32_t n, uint64_t elem) {
  return (static_cast<uint64_t>(n_rows - 1) * stride + n) * elem;
}

void require_stride(const char* op, const char* name, uint32_t stride, uint32_t n, uint32_t n_rows) {
  if (n_rows > 1 && stride < n) {
    bad(op, std::string(name) + " stride: expected >= " + std::to_string(n) + ", got " + std::to_string(stride));
  }
}

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

void bind(KernelEncoder& enc, uint32_t index, const BufferSlice& s) { enc.set_buffer(index, s.buffer, s.offset); }

uint32_t checked_row_bytes(const char* op, DType type, uint32_t n_in) {
  const DTypeInfo& info = dtype_info(type);
  if (n_in == 0 || n_in % MUSER_METAL_CHUNK != 0 || n_in % info.block_elems != 0) {
    bad(op, std::string("row length of ") + info.name + ": expected a positive multiple of " +
                std::to_string(info.block_elems > MUSER_METAL_CHUNK ? info.block_elems : MUSER_METAL_CHUNK) +
                ", got " + std::to_string(n_in));
  }
  return static_cast<uint32_t>(row_bytes(type, n_in));
}

void encode_elementwise(KernelEncoder& enc, const char* op, const char* kernel, const ElementwiseArgs& args,
                        uint32_t args_index) {
  enc.set_pipeline(kernel);
  enc.set_bytes(args_index, &args, sizeof args);
  enc.dispatch({ceil_div(args.n, kElementwiseThreads), args.n_rows, 1}, {kElementwiseThreads, 1, 1});
}

}  // namespace

const char* const* kernel_names() {
  static const char* const names[] = {
      "mul_mv_f32",   "mul_mv_f16",   "mul_mv_bf16",  "mul_mv_q4_0",   "mul_mv_q4_1",   "mul_mv_q5_0",
      "mul_mv_q5_1",  "mul_mv_q8_0",  "mul_mv_q2_k",  "mul_mv_q3_k",   "mul_mv_q4_k",   "mul_mv_q5_k",
      "mul_mv_q6_k",  "get_rows_f32", "get_rows_f16", "get_rows_bf16", "get_rows_q4_0", "get_rows_q4_1",
      "get_rows_q5_0", "get_rows_q5_1", "get_rows_q8_0", "get_rows_q2_k", "get_rows_q3_k", "get_rows_q4_k",
      "get_rows_q5_k", "get_rows_q6_k", "rms_norm_f32", "rope_f32",     "kv_store_f16",  "attention_f16",
      "swiglu_f32",   "geglu_f32",    "add_f32",      "scale_f32",     "softcap_f32",   "copy_f32",
      nullptr};
  return names;
}

const char* matmul_kernel_name(DType type) {
  switch (type) {
    case DType::F32: return "mul_mv_f32";
    case DType::F16: return "mul_mv_f16";
    case DType::BF16: return "mul_mv_bf16";
    case DType::Q4_0: return "mul_mv_q4_0";
    case DType::Q4_1: return "mul_mv_q4_1";
    case DType::Q5_0: return "mul_mv_q5_0";
    case DType::Q5_1: return "mul_mv_q5_1";
    case DType::Q8_0: return "mul_mv_q8_0";
    case DType::Q2_K: return "mul_mv_q2_k";
    case DType::Q3_K: return "mul_mv_q3_k";
    case DType::Q4_K: return "mul_mv_q4_k";
    case DType::Q5_K: return "mul_mv_q5_k";
    case DType::Q6_K: return "mul_mv_q6_k";
  }
  bad("matmul", "weight type " + std::to_string(static_cast<uint32_t>(type)) + " has no Metal kernel");
}

const char* get_rows_kernel_name(DType type) {
  switch (type) {
    case DType::F32: return "get_rows_f32";
    case DType::F16: return "get_rows_f16";
    case DType::BF16: return "get_rows_bf16";
    case DType::Q4_0: return "get_rows_q4_0";
    case DType::Q4_1: return "get_rows_q4_1";
    case DType::Q5_0: return "get_rows_q5_0";
    case DType::Q5_1: return "get_rows_q5_1";
    case DType::Q8_0: return "get_rows_q8_0";
    case DType::Q2_K: return "get_rows_q2_k";
    case DType::Q3_K: return "get_rows_q3_k";
    case DType::Q4_K: return "get_rows_q4_k";
    case DType::Q5_K: return "get_rows_q5_k";
    case DType::Q6_K: return "get_rows_q6_k";
  }
  bad("get_rows", "table type " + std::to_string(static_cast<uint32_t>(type)) + " has no Metal kernel");
}

void encode_matmul(KernelEncoder& enc, DType type, BufferSlice w, uint32_t n_in, uint32_t n_out, BufferSlice x,
                   uint32_t x_stride, uint32_t n_rows, BufferSlice y, uint32_t y_stride) {
  const char* op = "matmul";
  const char* kernel = matmul_kernel_name(type);
  const uint32_t w_row_bytes = checked_row_bytes(op, type, n_in);
  require_positive(op, "n_out", n_out);
  require_positive(op, "n_rows", n_rows);
  require_stride(op, "x", x_stride, n_in, n_rows);
  require_stride(op, "y", y_stride, n_out, n_rows);
  require_bytes(op, "weight", w, static_cast<uint64_t>(w_row_bytes) * n_out);
  require_bytes(op, "x", x, rows_bytes(n_rows, x_stride, n_in, 4));
  require_bytes(op, "y", y, rows_bytes(n_rows, y_stride, n_out, 4));
  const MatmulArgs args{n_in, n_out, n_rows, w_row_bytes, x_stride, y_stride, kMatmulSimdgroups, 0};
  enc.set_pipeline(kernel);
  bind(enc, 0, w);
  bind(enc, 1, x);
  bind(enc, 2, y);
  enc.set_bytes(3, &args, sizeof args);
  enc.dispatch({ceil_div(n_out, kMatmulSimdgroups), ceil_div(n_rows, MUSER_METAL_MATMUL_ROWS), 1},
               {kMatmulSimdgroups * kSimd, 1, 1});
}

void encode_get_rows(KernelEncoder& enc, DType type, BufferSlice table, uint32_t n_in, uint32_t n_table_rows,
                     BufferSlice ids, uint32_t n_ids, BufferSlice out, uint32_t out_stride) {
  const char* op = "get_rows";
  const char* kernel = get_rows_kernel_name(type);
  const uint32_t t_row_bytes = checked_row_bytes(op, type, n_in);
  require_positive(op, "n_table_rows", n_table_rows);
  require_positive(op, "n_ids", n_ids);
  require_stride(op, "out", out_stride, n_in, n_ids);
  require_bytes(op, "table", table, static_cast<uint64_t>(t_row_bytes) * n_table_rows);
  require_bytes(op, "ids", ids, static_cast<uint64_t>(n_ids) * 4);
  require_bytes(op, "out", out, rows_bytes(n_ids, out_stride, n_in, 4));
  const GetRowsArgs args{n_in, n_table_rows, t_row_bytes, n_ids, out_stride, 0, 0, 0};
  enc.set_pipeline(kernel);
  bind(enc, 0, table);
  bind(enc, 1, ids);
  bind(enc, 2, out);
  enc.set_bytes(3, &args, sizeof args);
  enc.dispatch({n_ids, 1, 1}, {kSimd, 1, 1});
}

void encode_rms_norm(KernelEncoder& enc, BufferSlice x, uint32_t x_stride, BufferSlice weight, uint32_t n,
                     uint32_t n_groups, uint32_t n_rows, float eps, BufferSlice out, uint32_t out_stride) {
  const char* op = "rms_norm";
  require_positive(op, "n", n);
  require_positive(op, "n_groups", n_groups);
  require_positive(op, "n_rows", n_rows);
  const uint32_t row = n * n_groups;
  require_stride(op, "x", x_stride, row, n_rows);
  require_stride(op, "out", out_stride, row, n_rows);
  require_bytes(op, "x", x, rows_bytes(n_rows, x_stride, row, 4));
  const bool has_weight = weight.buffer.handle != nullptr;
  if (has_weight) require_bytes(op, "weight", weight, static_cast<uint64_t>(n) * 4);
  require_bytes(op, "out", out, rows_bytes(n_rows, out_stride, row, 4));
  // Small groups (per-head norms) take only the simdgroups they can use.
  const uint32_t simdgroups = std::min(kNormSimdgroups, ceil_div(n, kSimd));
  const RmsNormArgs args{n, n_groups, n_rows, x_stride, out_stride, eps, simdgroups, has_weight ? 1u : 0u};
  enc.set_pipeline("rms_norm_f32");
  bind(enc, 0, x);
  // Without a weight the kernel never reads buffer 1; bind x so the slot is valid.
  bind(enc, 1, has_weight ? weight : x);
  bind(enc, 2, out);
  enc.set_bytes(3, &args, sizeof args);
  enc.set_threadgroup_memory(0, simdgroups * sizeof(float));
  enc.dispatch({n_groups, n_rows, 1}, {simdgroups * kSimd, 1, 1});
}

void encode_rope(KernelEncoder& enc, BufferSlice x, uint32_t x_stride, uint32_t n_rows, uint32_t n_heads,
                 uint32_t head_dim, uint32_t n_rot, bool neox, BufferSlice cos_sin) {
  const char* op = "rope";
  require_positive(op, "n_rows", n_rows);
  require_positive(op, "n_heads", n_heads);
  if (n_rot == 0 || n_rot % 2 != 0 || n_rot > head_dim) {
    bad(op, "n_rot: expected an even number in 2.." + std::to_string(head_dim) + ", got " + std::to_string(n_rot));
  }
  require_stride(op, "x", x_stride, n_heads * head_dim, n_rows);
  require_bytes(op, "x", x, rows_bytes(n_rows, x_stride, n_heads * head_dim, 4));
  require_bytes(op, "cos_sin", cos_sin, static_cast<uint64_t>(n_rows) * n_rot * 4);
  const RopeArgs args{n_heads, head_dim, n_rot, neox ? 1u : 0u, n_rows, x_stride, 0, 0};
  enc.set_pipeline("rope_f32");
  bind(enc, 0, x);
  bind(enc, 1, cos_sin);
  enc.set_bytes(2, &args, sizeof args);
  enc.dispatch({n_heads, n_rows, 1}, {kSimd, 1, 1});
}

void encode_kv_store(KernelEncoder& enc, BufferSlice src, uint32_t src_stride, uint32_t n_rows, uint32_t width,
                     uint32_t start, uint32_t ring_rows, BufferSlice plane, uint32_t plane_rows) {
  const char* op = "kv_store";
  require_positive(op, "n_rows", n_rows);
  require_positive(op, "width", width);
  require_stride(op, "src", src_stride, width, n_rows);
  require_bytes(op, "src", src, rows_bytes(n_rows, src_stride, width, 4));
  // The highest plane row written: a ring wraps, a growing plane does not.
  uint64_t last_row = static_cast<uint64_t>(start) + n_rows - 1;
  if (ring_rows != 0) {
    const uint64_t first = start % ring_rows;
    last_row = first + n_rows - 1 >= ring_rows ? ring_rows - 1 : first + n_rows - 1;
  }
  if (last_row >= plane_rows) {
    bad(op, "positions: expected plane rows < " + std::to_string(plane_rows) + ", got up to row " +
                std::to_string(last_row));
  }
  require_bytes(op, "plane", plane, static_cast<uint64_t>(plane_rows) * width * 2);
  const KvStoreArgs args{width, n_rows, start, ring_rows, src_stride, 0, 0, 0};
  enc.set_pipeline("kv_store_f16");
  bind(enc, 0, src);
  bind(enc, 1, plane);
  enc.set_bytes(2, &args, sizeof args);
  enc.dispatch({n_rows, 1, 1}, {64, 1, 1});
}

void encode_attention(KernelEncoder& enc, const AttentionShape& s, BufferSlice q, uint32_t q_stride,
                      uint32_t n_rows, BufferSlice k_plane, BufferSlice v_plane, BufferSlice ranges,
                      BufferSlice out, uint32_t out_stride) {
  const char* op = "attention";
  require_positive(op, "n_rows", n_rows);
  require_positive(op, "n_head_kv", s.n_head_kv);
  if (s.n_head == 0 || s.n_head % s.n_head_kv != 0) {
    bad(op, "n_head: expected a positive multiple of n_head_kv " + std::to_string(s.n_head_kv) + ", got " +
                std::to_string(s.n_head));
  }
  for (uint32_t dim : {s.head_dim_k, s.head_dim_v}) {
    if (dim == 0 || dim > MUSER_METAL_MAX_HEAD_DIM) {
      bad(op, "head dimension: expected 1.." + std::to_string(MUSER_METAL_MAX_HEAD_DIM) + ", got " +
                  std::to_string(dim));
    }
  }
  require_positive(op, "plane_rows", s.plane_rows);
  const uint32_t k_width = s.n_head_kv * s.head_dim_k;
  const uint32_t v_width = s.n_head_kv * s.head_dim_v;
  require_stride(op, "q", q_stride, s.n_head * s.head_dim_k, n_rows);
  require_stride(op, "out", out_stride, s.n_head * s.head_dim_v, n_rows);
  require_bytes(op, "q", q, rows_bytes(n_rows, q_stride, s.n_head * s.head_dim_k, 4));
  require_bytes(op, "k_plane", k_plane, static_cast<uint64_t>(s.plane_rows) * k_width * 2);
  require_bytes(op, "v_plane", v_plane, static_cast<uint64_t>(s.plane_rows) * v_width * 2);
  require_bytes(op, "ranges", ranges, static_cast<uint64_t>(n_rows) * 8);
  require_bytes(op, "out", out, rows_bytes(n_rows, out_stride, s.n_head * s.head_dim_v, 4));
  const AttentionArgs args{s.n_head,  s.n_head_kv, s.head_dim_k,          s.head_dim_v, n_rows,    q_stride,
                           out_stride, k_width,    v_width,               s.ring_rows,  kAttentionSimdgroups,
                           s.scale,   s.softcap,   0,                     0,            0};
  enc.set_pipeline("attention_f16");
  bind(enc, 0, q);
  bind(enc, 1, k_plane);
  bind(enc, 2, v_plane);
  bind(enc, 3, ranges);
  bind(enc, 4, out);
  enc.set_bytes(5, &args, sizeof args);
  enc.set_threadgroup_memory(0, kAttentionSimdgroups * (2 + s.head_dim_v) * sizeof(float));
  enc.dispatch({s.n_head, n_rows, 1}, {kAttentionSimdgroups * kSimd, 1, 1});
}

void encode_glu(KernelEncoder& enc, GluKind kind, BufferSlice gate, uint32_t gate_stride, BufferSlice up,
                uint32_t up_stride, uint32_t n, uint32_t n_rows, BufferSlice out, uint32_t out_stride) {
  const char* op = "glu";
  require_positive(op, "n", n);
  require_positive(op, "n_rows", n_rows);
  require_stride(op, "gate", gate_stride, n, n_rows);
  require_stride(op, "up", up_stride, n, n_rows);
  require_stride(op, "out", out_stride, n, n_rows);
  require_bytes(op, "gate", gate, rows_bytes(n_rows, gate_stride, n, 4));
  require_bytes(op, "up", up, rows_bytes(n_rows, up_stride, n, 4));
  require_bytes(op, "out", out, rows_bytes(n_rows, out_stride, n, 4));
  const ElementwiseArgs args{n, n_rows, gate_stride, up_stride, out_stride, 0.0f, 0, 0};
  bind(enc, 0, gate);
  bind(enc, 1, up);
  bind(enc, 2, out);
  encode_elementwise(enc, op, kind == GluKind::SwiGlu ? "swiglu_f32" : "geglu_f32", args, 3);
}

void encode_add(KernelEncoder& enc, BufferSlice a, uint32_t a_stride, BufferSlice b, uint32_t b_stride, uint32_t n,
                uint32_t n_rows, BufferSlice out, uint32_t out_stride) {
  const char* op = "add";
  require_positive(op, "n", n);
  require_positive(op, "n_rows", n_rows);
  require_stride(op, "a", a_stride, n, n_rows);
  if (b_stride != 0) require_stride(op, "b", b_stride, n, n_rows);
  require_stride(op, "out", out_stride, n, n_rows);
  require_bytes(op, "a", a, rows_bytes(n_rows, a_stride, n, 4));
  require_bytes(op, "b", b, b_stride == 0 ? static_cast<uint64_t>(n) * 4 : rows_bytes(n_rows, b_stride, n, 4));
  require_bytes(op, "out", out, rows_bytes(n_rows, out_stride, n, 4));
  const ElementwiseArgs args{n, n_rows, a_stride, b_stride, out_stride, 0.0f, 0, 0};
  bind(enc, 0, a);
  bind(enc, 1, b);
  bind(enc, 2, out);
  encode_elementwise(enc, op, "add_f32", args, 3);
}

namespace {
void encode_unary(KernelEncoder& enc, const char* op, const char* kernel, BufferSlice x, uint32_t x_stride,
                  float value, uint32_t n, uint32_t n_rows, BufferSlice out, uint32_t out_stride) {
  require_positive(op, "n", n);
  require_positive(op, "n_rows", n_rows);
  require_stride(op, "x", x_stride, n, n_rows);
  require_stride(op, "out", out_stride, n, n_rows);
  require_bytes(op, "x", x, rows_bytes(n_rows, x_stride, n, 4));
  require_bytes(op, "out", out, rows_bytes(n_rows, out_stride, n, 4));
  const ElementwiseArgs args{n, n_rows, x_stride, 0, out_stride, value, 0, 0};
  bind(enc, 0, x);
  bind(enc, 1, out);
  encode_elementwise(enc, op, kernel, args, 2);
}
}  // namespace

void encode_scale(KernelEncoder& enc, BufferSlice x, uint32_t x_stride, float factor, uint32_t n, uint32_t n_rows,
                  BufferSlice out, uint32_t out_stride) {
  encode_unary(enc, "scale", "scale_f32", x, x_stride, factor, n, n_rows, out, out_stride);
}

void encode_copy(KernelEncoder& enc, BufferSlice x, uint32_t x_stride, uint32_t n, uint32_t n_rows, BufferSlice out,
                 uint32_t out_stride) {
  encode_unary(enc, "copy", "copy_f32", x, x_stride, 0.0f, n, n_rows, out, out_stride);
}

void encode_softcap(KernelEncoder& enc, BufferSlice x, uint32_t x_stride, float cap, uint32_t n, uint32_t n_rows,
                    BufferSlice out, uint32_t out_stride) {
  if (!(cap > 0.0f)) bad("softcap", "cap: expected > 0, got " + std::to_string(cap));
  encode_unary(enc, "softcap", "softcap_f32", x, x_stride, cap, n, n_rows, out, out_stride);
}

}  // namespace muser::metal
