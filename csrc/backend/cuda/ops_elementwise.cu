// Row-wise ops of the CUDA backend: norms, residual adds, activations, RoPE,
// the embedding lookup and the f16 KV store. Each thread or block computes
// from its own row only, with fixed-order reductions.
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/glu_value.cuh"
#include "backend/cuda/quantize_block.cuh"
#include "backend/cuda/weight_units.cuh"
#include "core/env_switch.h"
#include "core/error.h"

namespace muser::cuda {
namespace {

// rms_norm of rows narrower than 512 (per-head norms) or of a width that is
// no multiple of 32 (wider rows of a multiple of 32, every model's hidden
// size: rms_norm_blocks_kernel below): one block per row, each thread
// keeping kNormPerThread elements (strided by the block) in registers so all
// its loads are in flight at once; the block is sized from the width alone
// (a warp per 512 elements, at most 1024 threads), so a row's reduction
// order is the same in any launch.
constexpr int kNormPerThread = 16;
constexpr int kNormMaxThreads = 1024;

unsigned norm_threads(size_t width) {
  const size_t warps = (width + 32 * kNormPerThread - 1) / (32 * kNormPerThread);
  return static_cast<unsigned>(32 * std::min<size_t>(std::max<size_t>(warps, 1), kNormMaxThreads / 32));
}

// The row's 1 / sqrt(mean of squares + eps), from each thread's sum of
// squares of its elements (every thread of the block calls it): the warp
// butterfly, then warp 0 over the warps' sums.
template <unsigned kMaxThreads>
__device__ __forceinline__ float rms_scale(double sum, size_t width, float eps) {
  const unsigned t = threadIdx.x, n = blockDim.x;
  sum = warp_sum(sum);
  __shared__ double partial[kMaxThreads / 32];
  __shared__ float scale_s;
  if (t % 32 == 0) partial[t / 32] = sum;
  __syncthreads();
  if (t < 32) {
    double total = t < n / 32 ? partial[t] : 0.0;
    total = warp_sum(total);
    if (t == 0) {
      const float mean = static_cast<float>(total / static_cast<double>(width));
      scale_s = 1.0f / sqrtf(mean + eps);
    }
  }
  __syncthreads();
  return scale_s;
}

// Sum of squares in double (as the CPU reference does): each thread's
// elements in order, the warp butterfly, then warp 0 over the warps' sums;
// out = (x * scale) * w. With `residual`, the row normalized is x + residual
// (the float sums add_kernel makes), stored to sum_out first: the residual
// add before a norm, in the same launch. Elements past kNormPerThread *
// blockDim (rows wider than 16384) are read again in a second strided pass
// (from sum_out when adding: x may be sum_out). kQuant 1 / 2: each warp also
// quantizes (Q8_0 / Q8_1) the 32 consecutive outputs it just wrote, from the
// same floats (the width is then a multiple of 32, so every warp-wide step is
// all in or all out of the row).
template <int kQuant>
__global__ void __launch_bounds__(kNormMaxThreads)
    rms_norm_kernel(const float* x, const float* residual, float* sum_out, const float* weight, size_t width,
                    float eps, float* out, int8_t* q, float* d, float* s) {
  const size_t row = blockIdx.x;
  const unsigned n = blockDim.x, t = threadIdx.x;
  // The norm weights are never written by a kernel: their loads (from
  // device memory, the step's weight stream having evicted them from L2)
  // are issued before dependent_launch_begin(), so they arrive while the
  // previous kernel finishes instead of after it; x is read after it.
  float wv[kNormPerThread];
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) {
    const size_t i = t + j * n;
    wv[j] = i < width && weight != nullptr ? weight[i] : 1.0f;
  }
  dependent_launch_begin();
  const float* xr = x + row * width;
  const float* rr = residual != nullptr ? residual + row * width : nullptr;
  float* sr = sum_out != nullptr ? sum_out + row * width : nullptr;
  // Element i of the row normalized, read once (and its sum stored) per pass.
  auto load = [&](size_t i) -> float {
    if (rr == nullptr) return xr[i];
    const float e = xr[i] + rr[i];
    sr[i] = e;
    return e;
  };
  float v[kNormPerThread];
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) {
    const size_t i = t + j * n;
    v[j] = i < width ? load(i) : 0.0f;
  }
  double sum = 0.0;
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) sum += static_cast<double>(v[j]) * static_cast<double>(v[j]);
  for (size_t i = t + kNormPerThread * n; i < width; i += n) {
    const double e = static_cast<double>(load(i));
    sum += e * e;
  }
  const float scale = rms_scale<kNormMaxThreads>(sum, width, eps);
  float* o = out != nullptr ? out + row * width : nullptr;  // null: the quantized view alone
  const size_t row_block = row * (width / 32);
  auto emit = [&](size_t i, float xi, float wi) {
    const float y = weight != nullptr ? (xi * scale) * wi : xi * scale;
    if (o != nullptr) o[i] = y;
    if constexpr (kQuant != 0) quantize_block32<kQuant == 2>(y, static_cast<int>(t % 32), row_block + i / 32, q, d, s);
  };
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) {
    const size_t i = t + j * n;
    if (i < width) emit(i, v[j], wv[j]);
  }
  // Each index is read and written by one thread, reads first: out may be x
  // (or sum_out).
  for (size_t i = t + kNormPerThread * n; i < width; i += n) {
    emit(i, rr != nullptr ? sr[i] : xr[i], weight != nullptr ? weight[i] : 1.0f);
  }
}

// rms_norm of rows whose width is a multiple of 32 and at least
// kBlockNormMinWidth (every model's hidden size; 16-byte aligned rows, as
// every buffer of the backend starts): thread t owns the
// 32-element blocks t, t + n, ... of its row, n = min(width / 32,
// kBlockNormMaxThreads) threads (whole warps; threads past the row's blocks
// own none). Its loads are 16-byte words, and the Q8 quantization of a block
// is the thread's own (quantize_block32_part): the strided kernel's warps
// ran one 32-lane max and sum after another for each of their 16 blocks, and
// a 4096-wide norm took ~10 us of a decode step, 65 times per step. The sum
// of squares in double: each block's four interleaved partial sums, the
// thread's blocks in order, the warp butterfly, warp 0 over the warps. The
// block count alone fixes that order. Blocks past the first are read again
// for the output (from sum_out when adding), as rms_norm_kernel does.
constexpr size_t kBlockNormMinWidth = 512;
constexpr unsigned kBlockNormMaxThreads = 256;

bool block_norm_width(size_t width) { return width % 32 == 0 && width >= kBlockNormMinWidth; }

unsigned block_norm_threads(size_t width) {
  const size_t threads = std::min<size_t>(width / 32, kBlockNormMaxThreads);
  return static_cast<unsigned>((threads + 31) / 32 * 32);
}

// A 32-float block in 16-byte words (p 16-byte aligned): the norm weights
// through the read-only path (never written by a kernel), what an earlier
// kernel of the step wrote (x, residual) with plain loads.
__device__ __forceinline__ void load_block32_constant(const float* p, float (&v)[32]) {
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(p) + w);
    v[4 * w] = f.x, v[4 * w + 1] = f.y, v[4 * w + 2] = f.z, v[4 * w + 3] = f.w;
  }
}

__device__ __forceinline__ void load_block32(const float* p, float (&v)[32]) {
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    const float4 f = reinterpret_cast<const float4*>(p)[w];
    v[4 * w] = f.x, v[4 * w + 1] = f.y, v[4 * w + 2] = f.z, v[4 * w + 3] = f.w;
  }
}

__device__ __forceinline__ void store_block32(float* p, const float (&v)[32]) {
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    reinterpret_cast<float4*>(p)[w] = make_float4(v[4 * w], v[4 * w + 1], v[4 * w + 2], v[4 * w + 3]);
  }
}

__device__ __forceinline__ double block_sum_of_squares(const float (&v)[32]) {
  double part[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
  for (int e = 0; e < 32; ++e) part[e % 4] += static_cast<double>(v[e]) * static_cast<double>(v[e]);
  return (part[0] + part[1]) + (part[2] + part[3]);
}

template <int kQuant>
__global__ void __launch_bounds__(kBlockNormMaxThreads)
    rms_norm_blocks_kernel(const float* x, const float* residual, float* sum_out, const float* weight, size_t width,
                           float eps, float* out, int8_t* q, float* d, float* s) {
  const size_t row = blockIdx.x;
  const size_t n = blockDim.x, t = threadIdx.x, n_blocks = width / 32;
  // The norm weights are never written by a kernel: loaded before the wait
  // (see rms_norm_kernel).
  float wv[32];
  if (t < n_blocks && weight != nullptr) load_block32_constant(weight + 32 * t, wv);
  dependent_launch_begin();
  const float* xr = x + row * width;
  const float* rr = residual != nullptr ? residual + row * width : nullptr;
  float* sr = sum_out != nullptr ? sum_out + row * width : nullptr;
  // Block b of the row to normalize, its sum stored when adding.
  auto load = [&](size_t b, float (&v)[32]) {
    load_block32(xr + 32 * b, v);
    if (rr == nullptr) return;
    float r[32];
    load_block32(rr + 32 * b, r);
#pragma unroll
    for (int e = 0; e < 32; ++e) v[e] += r[e];
    store_block32(sr + 32 * b, v);
  };
  float v[32];
  double sum = 0.0;
  if (t < n_blocks) {
    load(t, v);
    sum = block_sum_of_squares(v);
  }
  for (size_t b = t + n; b < n_blocks; b += n) {
    float e[32];
    load(b, e);
    sum += block_sum_of_squares(e);
  }
  const float scale = rms_scale<kBlockNormMaxThreads>(sum, width, eps);
  float* o = out != nullptr ? out + row * width : nullptr;  // null: the quantized view alone
  const size_t row_block = row * n_blocks;
  auto emit = [&](size_t b, float (&y)[32], const float (&w)[32]) {
#pragma unroll
    for (int e = 0; e < 32; ++e) y[e] = weight != nullptr ? (y[e] * scale) * w[e] : y[e] * scale;
    if (o != nullptr) store_block32(o + 32 * b, y);
    if constexpr (kQuant != 0) quantize_block32_part<kQuant == 2, 1>(y, 0, row_block + b, q, d, s);
  };
  if (t < n_blocks) emit(t, v, wv);
  // Each element is read and written by one thread, reads first: out may be
  // x (or sum_out).
  for (size_t b = t + n; b < n_blocks; b += n) {
    float y[32], w[32];
    load_block32((rr != nullptr ? sr : xr) + 32 * b, y);
    if (weight != nullptr) load_block32_constant(weight + 32 * b, w);
    emit(b, y, w);
  }
}

// rms_norm of rows of 512..4096 elements, a multiple of 128 (llama3-8b's
// 4096, most models' hidden sizes): one thread per 4 consecutive elements
// (width / 4 threads), so a thread's chain is one 16-byte load (two when
// adding), four squares and one store, where rms_norm_blocks_kernel's
// thread walked a 32-element block (5.4 us of each of a llama3-8b decode
// step's 65 norms, at 1 and at 4 rows alike: latency, not bandwidth). The
// sum of squares in double: the thread's four in order, the warp
// butterfly, warp 0 over the warps (rms_scale); the width alone fixes that
// order. A 32-element block's quantization is shared by the 8 lanes that
// hold it (quantize_block32_part), so the bytes are the reference's.
constexpr size_t kVecNormMinWidth = 512, kVecNormMaxWidth = 4096;

bool vec_norm_width(size_t width) {
  // MUSER_CUDA_NORM=blocks (read once, for A/B runs) keeps these widths on
  // rms_norm_blocks_kernel.
  static const bool off = env_is("MUSER_CUDA_NORM", "blocks");
  return !off && width % 128 == 0 && width >= kVecNormMinWidth && width <= kVecNormMaxWidth;
}

template <int kQuant>
__global__ void __launch_bounds__(kVecNormMaxWidth / 4)
    rms_norm_vec_kernel(const float* x, const float* residual, float* sum_out, const float* weight, size_t width,
                        float eps, float* out, int8_t* q, float* d, float* s) {
  const size_t row = blockIdx.x, t = threadIdx.x;
  const size_t at = row * width + 4 * t;
  // The norm weights are never written by a kernel: loaded before the wait
  // (see rms_norm_kernel).
  float4 w = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
  if (weight != nullptr) w = __ldg(reinterpret_cast<const float4*>(weight) + t);
  dependent_launch_begin();
  float4 v = *reinterpret_cast<const float4*>(x + at);
  if (residual != nullptr) {
    const float4 r = *reinterpret_cast<const float4*>(residual + at);
    v = make_float4(v.x + r.x, v.y + r.y, v.z + r.z, v.w + r.w);
    *reinterpret_cast<float4*>(sum_out + at) = v;
  }
  double sum = static_cast<double>(v.x) * static_cast<double>(v.x);
  sum += static_cast<double>(v.y) * static_cast<double>(v.y);
  sum += static_cast<double>(v.z) * static_cast<double>(v.z);
  sum += static_cast<double>(v.w) * static_cast<double>(v.w);
  const float scale = rms_scale<kVecNormMaxWidth / 4>(sum, width, eps);
  float y[4] = {v.x * scale, v.y * scale, v.z * scale, v.w * scale};
  if (weight != nullptr) y[0] *= w.x, y[1] *= w.y, y[2] *= w.z, y[3] *= w.w;
  if (out != nullptr) *reinterpret_cast<float4*>(out + at) = make_float4(y[0], y[1], y[2], y[3]);
  if constexpr (kQuant != 0) quantize_block32_part<kQuant == 2, 8>(y, static_cast<int>(t % 8), at / 32, q, d, s);
}

// One launch of the rms_norm of n rows (residual, sum_out: the add before
// it; q, d, s: its Q8 view, kQuant 1 / 2), the kernel chosen by the width
// alone, so a row's bits are the same in every launch of that width.
template <int kQuant>
void launch_rms_norm(size_t n, const float* x, const float* residual, float* sum_out, const float* weight,
                     size_t width, float eps, float* out, int8_t* q, float* d, float* s, cudaStream_t stream) {
  if (!block_norm_width(width)) {
    launch_dependent(rms_norm_kernel<kQuant>, static_cast<unsigned>(n), norm_threads(width), 0, stream, x, residual,
                     sum_out, weight, width, eps, out, q, d, s);
    return;
  }
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!(aligned(x) && aligned(residual) && aligned(sum_out) && aligned(weight) && aligned(out) && aligned(q))) {
    // Device buffers and the activation arena's tensors start 256-byte aligned.
    throw InternalError("[cuda rms_norm] its buffers must start 16-byte aligned");
  }
  if (vec_norm_width(width)) {
    launch_dependent(rms_norm_vec_kernel<kQuant>, static_cast<unsigned>(n), static_cast<unsigned>(width / 4), 0, stream,
                     x, residual, sum_out, weight, width, eps, out, q, d, s);
    return;
  }
  launch_dependent(rms_norm_blocks_kernel<kQuant>, static_cast<unsigned>(n), block_norm_threads(width), 0, stream, x,
                   residual, sum_out, weight, width, eps, out, q, d, s);
}

__global__ void add_kernel(float* dst, const float* a, const float* b, size_t n, size_t width, size_t b_row_stride) {
  dependent_launch_begin();
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * width) return;
  dst[i] = a[i] + b[(i / width) * b_row_stride + i % width];
}

__global__ void scale_kernel(float* dst, const float* src, size_t count, float factor) {
  dependent_launch_begin();
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) dst[i] = src[i] * factor;
}

__global__ void softcap_kernel(float* dst, const float* src, size_t count, float cap) {
  dependent_launch_begin();
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) dst[i] = cap * tanhf(src[i] / cap);
}

// kQuant 1 / 2: each warp also quantizes (Q8_0 / Q8_1) the 32 consecutive
// outputs it just wrote, from the same floats (count is then a multiple of
// 32: a warp is all in or all out of range, and its 32 elements are one
// block of the flat (rows, width) activation layout).
template <int kQuant>
__global__ void glu_kernel(int kind, float* dst, const float* gate, const float* up, size_t count, int8_t* q,
                           float* d, float* s) {
  dependent_launch_begin();
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float y = glu_value(kind, gate[i], up[i]);
  if (dst != nullptr) dst[i] = y;  // null: the quantized view alone
  if constexpr (kQuant != 0) quantize_block32<kQuant == 2>(y, static_cast<int>(threadIdx.x % 32), i / 32, q, d, s);
}

__global__ void slice_cols_kernel(float* dst, const float* src, size_t n, size_t src_cols, size_t offset,
                                  size_t dst_cols) {
  dependent_launch_begin();
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * dst_cols) return;
  dst[i] = src[(i / dst_cols) * src_cols + offset + i % dst_cols];
}

// The KvStore that follows a layer's rope pair, done by the same launch
// (kv.tables null: none): b's rotated rows are the keys, v the values.
struct RopeKvStore {
  KvRows kv;
  uint32_t n_layer = 0, layer = 0;
  bool ring = false;
  const float* v = nullptr;
  size_t v_width = 0;
};

// Plane row of row r of this step in a layer (ring layers wrap).
__device__ __forceinline__ size_t kv_slot(const KvRows& kv, bool ring, size_t r) {
  const int32_t pos = kv.positions[r];
  return ring ? static_cast<size_t>(pos % kv.ring_rows[r]) : static_cast<size_t>(pos);
}

// Grid (row, group of kRopeHeads heads [, 1]): groups [0, groups_a) rotate
// the heads of a, the next ones those of b (a decode layer's q and k in one
// launch; b may be empty). The block's threads first take the angles, one
// frequency each, in double as on the CPU (so both backends rotate by the
// same float cos/sin), then the rotations of the group's (head, pair)s:
// every thread's loads are independent, and the costly double cos/sin run
// once per block instead of once per head. With a KV store, b's blocks then
// store their heads (rotated, as write_kv converts them) and one more block
// per row stores v.
constexpr unsigned kRopeThreads = 128;
constexpr size_t kRopeHeads = 4;

__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(float* a, size_t n_heads_a, unsigned groups_a, float* b, size_t n_heads_b, size_t head_dim,
                size_t n_rot, bool neox, const int32_t* positions, const double* inv_freq, double position_scale,
                RopeKvStore store) {
  extern __shared__ float angles[];  // cos of the n_rot / 2 frequencies, then their sin
  const size_t row = blockIdx.x;
  const bool storing = store.kv.tables != nullptr;
  if (storing && blockIdx.y == gridDim.y - 1) {
    dependent_launch_begin();
    if (store.kv.writes[row] == 0) return;
    const float* src = store.v + row * store.v_width;
    uint16_t* dst = const_cast<uint16_t*>(store.kv.tables[row][store.n_layer + store.layer]) +
                    kv_slot(store.kv, store.ring, row) * store.v_width;
#pragma unroll 4
    for (size_t i = threadIdx.x; i < store.v_width; i += kRopeThreads) dst[i] = f32_to_f16_bits(src[i]);
    return;
  }
  const bool in_a = blockIdx.y < groups_a;
  float* x = in_a ? a : b;
  const size_t n_heads = in_a ? n_heads_a : n_heads_b;
  const size_t h0 = static_cast<size_t>(in_a ? blockIdx.y : blockIdx.y - groups_a) * kRopeHeads;
  const size_t half = n_rot / 2;
  // The angles before dependent_launch_begin(): no kernel writes the
  // positions (copied in before a step's first kernel, which starts only
  // after that copy, and every later kernel only after the one before it
  // has passed its own wait) or the frequencies (uploaded once), so the
  // double cos/sin, the costly part of this kernel, overlap the previous
  // kernel's tail instead of following it.
  const double p = static_cast<double>(positions[row]) * position_scale;
  for (size_t i = threadIdx.x; i < half; i += kRopeThreads) {
    const double theta = p * inv_freq[i];
    angles[i] = static_cast<float>(cos(theta));
    angles[half + i] = static_cast<float>(sin(theta));
  }
  dependent_launch_begin();
  __syncthreads();
  const size_t heads = min(kRopeHeads, n_heads - h0);
  for (size_t t = threadIdx.x; t < heads * half; t += kRopeThreads) {
    const size_t h = h0 + t / half, i = t % half;
    const float c = angles[i], s = angles[half + i];
    float* head = x + (row * n_heads + h) * head_dim;
    float* lo = neox ? head + i : head + 2 * i;
    float* hi = neox ? head + i + half : head + 2 * i + 1;
    const float x0 = *lo, x1 = *hi;
    *lo = x0 * c - x1 * s;
    *hi = x0 * s + x1 * c;
  }
  if (!storing || in_a) return;
  // The block's k heads, rotated by its own threads (visible after the
  // barrier), whole (dims past n_rot too), as write_kv stores the k row.
  __syncthreads();
  if (store.kv.writes[row] == 0) return;
  const size_t k_width = n_heads_b * head_dim;
  const float* src = b + row * k_width + h0 * head_dim;
  uint16_t* dst = const_cast<uint16_t*>(store.kv.tables[row][store.layer]) +
                  kv_slot(store.kv, store.ring, row) * k_width + h0 * head_dim;
  for (size_t i = threadIdx.x; i < heads * head_dim; i += kRopeThreads) dst[i] = f32_to_f16_bits(src[i]);
}

template <typename T>
__global__ void get_rows_kernel(const uint8_t* w, size_t row_bytes, size_t k, const int32_t* ids, float* out) {
  dependent_launch_begin();
  const size_t r = blockIdx.x;
  const uint8_t* wrow = w + static_cast<size_t>(ids[r]) * row_bytes;
  for (size_t e = threadIdx.x; e < k; e += blockDim.x) {
    out[r * k + e] = T::dequant(wrow, static_cast<int>(e / 32), static_cast<int>(e % 32));
  }
}

// Grid (row, 2): block y 0 stores the row's K, block y 1 its V; the
// conversions of a thread are independent, unrolled so their loads overlap.
__global__ void write_kv_kernel(KvRows kv, uint32_t n_layer, uint32_t layer, bool ring, const float* k,
                                size_t k_width, const float* v, size_t v_width) {
  dependent_launch_begin();
  const size_t r = blockIdx.x;
  if (kv.writes[r] == 0) return;
  const bool value = blockIdx.y == 1;
  const size_t slot = kv_slot(kv, ring, r);
  const size_t width = value ? v_width : k_width;
  const float* src = (value ? v : k) + r * width;
  uint16_t* dst = const_cast<uint16_t*>(kv.tables[r][value ? n_layer + layer : layer]) + slot * width;
#pragma unroll 4
  for (size_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = f32_to_f16_bits(src[i]);
}

__global__ void gather_rows_kernel(const float* x, size_t width, const int32_t* ids, float* out) {
  dependent_launch_begin();
  const size_t r = blockIdx.x;
  const float* src = x + static_cast<size_t>(ids[r]) * width;
  for (size_t i = threadIdx.x; i < width; i += blockDim.x) out[r * width + i] = src[i];
}

constexpr unsigned kThreads = 256;

}  // namespace

void gather_rows(const float* x, size_t width, const int32_t* ids, size_t n, float* out, void* stream) {
  if (n == 0) return;
  launch_dependent(gather_rows_kernel, static_cast<unsigned>(n), kThreads, 0, static_cast<cudaStream_t>(stream), x,
                   width, ids, out);
  check_launch("gather_rows");
}

void rms_norm(const float* x, const float* weight, size_t n, size_t width, float eps, float* out, void* stream) {
  if (n == 0) return;
  launch_rms_norm<0>(n, x, nullptr, nullptr, weight, width, eps, out, nullptr, nullptr, nullptr,
                     static_cast<cudaStream_t>(stream));
  check_launch("rms_norm");
}

ActivationView add_rms_norm(float* sum_out, const float* a, const float* b, const float* weight, size_t n,
                            size_t width, float eps, float* out, ActivationFormat format, void* scratch,
                            void* stream) {
  const bool quantize = format != ActivationFormat::F32;
  if ((quantize && format != ActivationFormat::Q8_0 && format != ActivationFormat::Q8_1) ||
      (quantize && width % 32 != 0)) {
    throw InternalError("[cuda add_rms_norm] quantizes to Q8_0 or Q8_1 only, rows of a multiple of 32");
  }
  if (!quantize && out == nullptr) throw InternalError("[cuda add_rms_norm] without a quantized view needs out");
  ActivationView view = activation_view(format, n, width, scratch);
  if (n == 0) return view;
  int8_t* q = const_cast<int8_t*>(view.q);
  float* d = const_cast<float*>(view.d);
  float* s = const_cast<float*>(view.s);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (format == ActivationFormat::Q8_1) {
    launch_rms_norm<2>(n, a, b, sum_out, weight, width, eps, out, q, d, s, st);
  } else if (format == ActivationFormat::Q8_0) {
    launch_rms_norm<1>(n, a, b, sum_out, weight, width, eps, out, q, d, nullptr, st);
  } else {
    launch_rms_norm<0>(n, a, b, sum_out, weight, width, eps, out, nullptr, nullptr, nullptr, st);
  }
  check_launch("add_rms_norm");
  return view;
}

ActivationView rms_norm_quantized(const float* x, const float* weight, size_t n, size_t width, float eps, float* out,
                                  ActivationFormat format, void* scratch, void* stream) {
  if ((format != ActivationFormat::Q8_0 && format != ActivationFormat::Q8_1) || width % 32 != 0) {
    throw InternalError("[cuda rms_norm_quantized] needs Q8_0 or Q8_1 and a width multiple of 32");
  }
  const ActivationView view = activation_view(format, n, width, scratch);
  if (n == 0) return view;
  int8_t* q = const_cast<int8_t*>(view.q);
  float* d = const_cast<float*>(view.d);
  float* s = const_cast<float*>(view.s);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (format == ActivationFormat::Q8_1) {
    launch_rms_norm<2>(n, x, nullptr, nullptr, weight, width, eps, out, q, d, s, st);
  } else {
    launch_rms_norm<1>(n, x, nullptr, nullptr, weight, width, eps, out, q, d, nullptr, st);
  }
  check_launch("rms_norm_quantized");
  return view;
}

void add(float* dst, const float* a, const float* b, size_t n, size_t width, size_t b_row_stride, void* stream) {
  if (n * width == 0) return;
  launch_dependent(add_kernel, ceil_div(n * width, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream), dst, a, b,
                   n, width, b_row_stride);
  check_launch("add");
}

void scale(float* dst, const float* src, size_t count, float factor, void* stream) {
  if (count == 0) return;
  launch_dependent(scale_kernel, ceil_div(count, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream), dst, src,
                   count, factor);
  check_launch("scale");
}

void softcap(float* dst, const float* src, size_t count, float cap, void* stream) {
  if (count == 0) return;
  launch_dependent(softcap_kernel, ceil_div(count, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream), dst, src,
                   count, cap);
  check_launch("softcap");
}

void glu(Glu kind, float* dst, const float* gate, const float* up, size_t count, void* stream) {
  if (count == 0) return;
  launch_dependent(glu_kernel<0>, ceil_div(count, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream),
                   static_cast<int>(kind), dst, gate, up, count, nullptr, nullptr, nullptr);
  check_launch("glu");
}

ActivationView glu_quantized(Glu kind, float* dst, const float* gate, const float* up, size_t n_rows, size_t width,
                             ActivationFormat format, void* scratch, void* stream) {
  if ((format != ActivationFormat::Q8_0 && format != ActivationFormat::Q8_1) || width % 32 != 0) {
    throw InternalError("[cuda glu_quantized] needs Q8_0 or Q8_1 and a width multiple of 32");
  }
  const ActivationView view = activation_view(format, n_rows, width, scratch);
  const size_t count = n_rows * width;
  if (count == 0) return view;
  int8_t* q = const_cast<int8_t*>(view.q);
  float* d = const_cast<float*>(view.d);
  float* s = const_cast<float*>(view.s);
  const unsigned grid = ceil_div(count, kThreads);
  if (format == ActivationFormat::Q8_1) {
    launch_dependent(glu_kernel<2>, grid, kThreads, 0, static_cast<cudaStream_t>(stream), static_cast<int>(kind), dst,
                     gate, up, count, q, d, s);
  } else {
    launch_dependent(glu_kernel<1>, grid, kThreads, 0, static_cast<cudaStream_t>(stream), static_cast<int>(kind), dst,
                     gate, up, count, q, d, nullptr);
  }
  check_launch("glu_quantized");
  return view;
}

void slice_cols(float* dst, const float* src, size_t n, size_t src_cols, size_t offset, size_t dst_cols,
                void* stream) {
  if (n * dst_cols == 0) return;
  launch_dependent(slice_cols_kernel, ceil_div(n * dst_cols, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream),
                   dst, src, n, src_cols, offset, dst_cols);
  check_launch("slice_cols");
}

void rope(float* x, size_t n_rows, size_t n_heads, size_t head_dim, size_t n_rot, bool neox,
          const int32_t* positions, const double* inv_freq, double position_scale, void* stream) {
  rope_pair(x, n_heads, nullptr, 0, n_rows, head_dim, n_rot, neox, positions, inv_freq, position_scale, stream);
}

void rope_pair(float* a, size_t n_heads_a, float* b, size_t n_heads_b, size_t n_rows, size_t head_dim, size_t n_rot,
               bool neox, const int32_t* positions, const double* inv_freq, double position_scale, void* stream) {
  if (n_rows == 0 || n_heads_a + n_heads_b == 0 || n_rot == 0) return;
  const unsigned groups_a = ceil_div(n_heads_a, kRopeHeads), groups_b = ceil_div(n_heads_b, kRopeHeads);
  const dim3 grid(static_cast<unsigned>(n_rows), groups_a + groups_b);
  launch_dependent(rope_kernel, grid, kRopeThreads, n_rot * sizeof(float), static_cast<cudaStream_t>(stream), a,
                   n_heads_a, groups_a, b, n_heads_b, head_dim, n_rot, neox, positions, inv_freq, position_scale,
                   RopeKvStore{});
  check_launch("rope");
}

void rope_pair_kv(float* a, size_t n_heads_a, float* b, size_t n_heads_b, size_t n_rows, size_t head_dim,
                  size_t n_rot, bool neox, const int32_t* positions, const double* inv_freq, double position_scale,
                  const KvRows& kv, uint32_t n_layer, uint32_t layer, bool ring, const float* v, size_t v_width,
                  void* stream) {
  if (n_rows == 0) return;
  if (n_rot == 0 || n_heads_b == 0 || kv.tables == nullptr) {
    throw InternalError("[cuda rope_pair_kv] needs rotated keys and a KV table");
  }
  const unsigned groups_a = ceil_div(n_heads_a, kRopeHeads), groups_b = ceil_div(n_heads_b, kRopeHeads);
  const dim3 grid(static_cast<unsigned>(n_rows), groups_a + groups_b + 1);
  RopeKvStore store;
  store.kv = kv;
  store.n_layer = n_layer;
  store.layer = layer;
  store.ring = ring;
  store.v = v;
  store.v_width = v_width;
  launch_dependent(rope_kernel, grid, kRopeThreads, n_rot * sizeof(float), static_cast<cudaStream_t>(stream), a,
                   n_heads_a, groups_a, b, n_heads_b, head_dim, n_rot, neox, positions, inv_freq, position_scale,
                   store);
  check_launch("rope_pair_kv");
}

void get_rows(DType type, const void* w, size_t k, const int32_t* ids, size_t n_rows, float* out, void* stream) {
  if (n_rows == 0) return;
  const size_t row_bytes = k / dtype_info(type).block_elems * dtype_info(type).block_bytes;
  const bool ok = dispatch_type(type, [&]<typename T>() {
    launch_dependent(get_rows_kernel<T>, static_cast<unsigned>(n_rows), kThreads, 0, static_cast<cudaStream_t>(stream),
                     static_cast<const uint8_t*>(w), row_bytes, k, ids, out);
  });
  if (!ok) throw InternalError(std::string("[cuda get_rows] no kernel for type ") + dtype_info(type).name);
  check_launch("get_rows");
}

void write_kv(const KvRows& kv, uint32_t n_layer, uint32_t layer, bool ring, const float* k, size_t k_width,
              const float* v, size_t v_width, size_t n_rows, void* stream) {
  if (n_rows == 0) return;
  launch_dependent(write_kv_kernel, dim3(static_cast<unsigned>(n_rows), 2), kThreads, 0,
                   static_cast<cudaStream_t>(stream), kv, n_layer, layer, ring, k, k_width, v, v_width);
  check_launch("write_kv");
}

}  // namespace muser::cuda
