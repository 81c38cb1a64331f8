// The decode matvec kernel (1..4 activation rows times a quantized weight
// matrix) and its launchers, shared by ops_matvec_decode.cu (plain launches)
// and ops_matvec_fused.cu (launches that also run the op after the matvec
// in their epilogue), so the two files compile in parallel.
//
// The decode matvec: a group of 1..4 activation rows times a quantized
// weight matrix, the step a decode group spends most of its time in.
//
// Every output is computed as the prefill kernel (ops_matvec.cu) computes it:
// lane l of one warp adds the terms (add_unit_term) of units l, l + 32, ...
// of the weight row in increasing order, then warp_sum folds the 32 lanes in
// its fixed butterfly.
// What differs is only which warp computes which outputs and how loads are
// shared, so a row's bits do not depend on the config, the group or the tile:
//   - a warp computes `warp_rows` consecutive weight rows for all rows of the
//     group, so each lane reads a unit's activations once for all those
//     weight rows (the compiler merges the identical loads of the inlined
//     term calls, which store nothing in between) instead of once per
//     weight row: with one weight row per warp, 4 activation rows cost ~7x
//     the weight bytes in L1 traffic and the 4-row kernel ran at half the
//     1-row kernel's speed;
//   - each lane issues the loads of `unroll` units of each of its weight
//     rows before it uses any, so enough bytes are in flight per SM to cover
//     the DRAM latency (one unit per lane at a time left the long-k rows
//     latency-bound);
//   - Q4_0 and Q4_K rows that start 16-byte aligned load a unit in aligned
//     16-byte words (Q4_0: the two holding its 18-byte block, shared by
//     neighbouring lanes) instead of many 1/2/4-byte loads, each of which
//     touched ~5 cache lines across the warp.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/activation_rows.cuh"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/glu_value.cuh"
#include "backend/cuda/launch_targets.cuh"
#include "backend/cuda/quantize_block.cuh"
#include "backend/cuda/weight_units.cuh"
#include "core/error.h"

namespace muser::cuda {
namespace {

constexpr int kDecodeWarpsPerBlock = 4;

// Loads unit u of a weight row as T::load does (bitwise the same Unit).
// The wide loaders read through the read-only data path (__ldg): the
// weights never change while a kernel runs.
template <typename T, bool kWide>
struct UnitLoader {
  __device__ static void load(const uint8_t* row, int u, typename T::Unit& w) { T::load(row, u, w); }
};

// 16 weight bytes for the decode loaders. The weights are read once per
// step and stream through L1; marked first to leave it, they leave the
// activations, which every warp of a block reads again, in place. Measured
// on the H200 (session 10, llama3-8b Q4_0, against __ldg): +2.5% / +1% /
// +1% tok/s at 1 / 2 / 4 rows.
__device__ __forceinline__ uint4 load_weight16(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::evict_first.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Q4_0 from a 16-byte aligned row: block u's 18 bytes start at byte
// rel = 18u % 16 of the 32-byte aligned window at 18u - rel (rel <= 14, so
// the block ends inside the window, and the window inside the row).
template <>
struct UnitLoader<TypeQ4_0, true> {
  __device__ static void load(const uint8_t* row, int u, TypeQ4_0::Unit& w) {
    const int off = TypeQ4_0::kBlockBytes * u;
    const uint4* p = reinterpret_cast<const uint4*>(row + (off & ~15));
    const uint4 a = load_weight16(p), b = load_weight16(p + 1);
    const uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    const int e = (off & 15) >> 2;   // the window word holding the block's first byte, 0..3
    const int shift = (off & 3) * 8; // 0, or 16 for a block starting mid-word
    // win[c] = words[e + c]: the block's bytes lie in words e..e + 4.
    uint32_t win[5];
#pragma unroll
    for (int c = 0; c < 5; ++c) {
      win[c] = e == 0 ? words[c] : e == 1 ? words[c + 1] : e == 2 ? words[c + 2] : words[c + 3];
    }
    w.d = f16_bits_to_f32(static_cast<uint16_t>((win[0] >> shift) & 0xffffu));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Block bytes 2 + 4i .. 5 + 4i: the upper half of win[i] and the lower
      // half of win[i + 1], or (block starting mid-word) all of win[i + 1].
      const uint32_t v = __funnelshift_rc(win[i], win[i + 1], 16 + shift);
      w.q[i] = static_cast<int>(__vsub4(v & 0x0f0f0f0fu, 0x08080808u));
      w.q[4 + i] = static_cast<int>(__vsub4((v >> 4) & 0x0f0f0f0fu, 0x08080808u));
    }
  }
};

// Q4_K from a 16-byte aligned row (super-blocks of 144 bytes stay aligned):
// the super-block's first 16 bytes (d, dmin, the 12 scale bytes) and the 32
// quant bytes of unit u in three 16-byte loads, instead of eight 4-byte,
// two 2-byte and five 1-byte ones. Scales decoded as k4_scale_min does.
template <>
struct UnitLoader<TypeQ4_K, true> {
  __device__ static void load(const uint8_t* row, int u, TypeQ4_K::Unit& w) {
    const uint8_t* b = row + TypeQ4_K::kBlockBytes * (u / 8);
    const int t = u % 8, p = t / 2, shift = 4 * (t % 2);
    const uint4 head = __ldg(reinterpret_cast<const uint4*>(b));
    const uint4* qs = reinterpret_cast<const uint4*>(b + 16 + 32 * p);
    const uint4 lo = __ldg(qs), hi = __ldg(qs + 1);
    w.d = f16_bits_to_f32(static_cast<uint16_t>(head.x & 0xffffu));
    w.dmin = f16_bits_to_f32(static_cast<uint16_t>(head.x >> 16));
    // Scale bytes t % 4 of bytes 0..3, 4..7 and 8..11 (block bytes 4.., 8.., 12..).
    const int byte_shift = 8 * (t % 4);
    const int s0 = static_cast<int>((head.y >> byte_shift) & 0xffu);
    const int s1 = static_cast<int>((head.z >> byte_shift) & 0xffu);
    const int s2 = static_cast<int>((head.w >> byte_shift) & 0xffu);
    if (t < 4) {
      w.sc = s0 & 63;
      w.mn = s1 & 63;
    } else {
      w.sc = (s2 & 0x0f) | ((s0 >> 6) << 4);
      w.mn = (s2 >> 4) | ((s1 >> 6) << 4);
    }
    const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) w.q[i] = static_cast<int>((words[i] >> shift) & 0x0f0f0f0fu);
  }
};

template <typename T>
constexpr bool kHasWideLoader = std::is_same_v<T, TypeQ4_0> || std::is_same_v<T, TypeQ4_K>;

// Lane `lane`'s sums (acc, zeroed here) of the terms of units lane, lane +
// 32, ... of each of kWarpRows weight rows for every row of x, units in
// increasing order per output, as the prefill kernel sums them. The decode
// kernels differ only in which thread computes which lane of which rows.
//
// Nothing read before dependent_launch_begin() is written by an earlier
// kernel (weights are uploaded once), so under programmatic dependent
// launch a lane's first weight loads are in flight while the previous
// kernel finishes; the activations are read only after the wait. Launched
// normally, the wait and the trigger return at once. A lane without units
// (short rows) has nothing to load first.
template <typename T, int kRows, int kWarpRows, int kUnroll, bool kWide>
__device__ __forceinline__ void lane_sums(const uint8_t* const (&wrow)[kWarpRows], int lane, int n_units,
                                          const ActRow (&act)[kRows], float (&acc)[kWarpRows][kRows]) {
#pragma unroll
  for (int j = 0; j < kWarpRows; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[j][r] = 0.0f;
  }
  if (lane >= n_units) dependent_launch_begin();
  for (int base = lane; base < n_units; base += 32 * kUnroll) {
    typename T::Unit unit[kUnroll][kWarpRows];
#pragma unroll
    for (int s = 0; s < kUnroll; ++s) {
      const int u = base + 32 * s;
      if (u < n_units) {
#pragma unroll
        for (int j = 0; j < kWarpRows; ++j) UnitLoader<T, kWide>::load(wrow[j], u, unit[s][j]);
      }
    }
    if (base == lane) dependent_launch_begin();
#pragma unroll
    for (int s = 0; s < kUnroll; ++s) {
      const int u = base + 32 * s;
      if (u < n_units) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int j = 0; j < kWarpRows; ++j) acc[j][r] = add_unit_term<T>(acc[j][r], unit[s][j], act[r], u);
        }
      }
    }
  }
}

// What a launch does after its matvec (ops_matvec_fused.cu):
//   kEpilogueNone    stores the outputs;
//   kEpilogueRopeKv  targets q, k, v: rotates q and k (RoPE, normal style:
//                    pairs (2i, 2i + 1) of the first n_rot dims of each
//                    head) as rope_pair does, stores them, and stores the
//                    rotated k and v as f16 into the layer's KV planes as
//                    write_kv does;
//   kEpilogueGlu     targets gate, up: stores them; the last block to finish
//                    each 32 columns (a counter per 32 columns says which)
//                    writes glu(gate, up) of those columns and its Q8_0 /
//                    Q8_1 quantization, as glu_quantized does.
constexpr int kEpilogueNone = 0;
constexpr int kEpilogueRopeKv = 1;
constexpr int kEpilogueGlu = 2;

struct DecodeEpilogue {
  // kEpilogueRopeKv
  KvRows kv;
  uint32_t n_layer = 0, layer = 0;
  bool ring = false;
  uint32_t head_dim = 0, n_rot = 0;
  const int32_t* positions = nullptr;
  const double* inv_freq = nullptr;
  double position_scale = 1.0;
  // kEpilogueGlu: out (n_rows, n_out of gate), the view's q / d / s (s
  // null: Q8_0), counters (n_out / 32, zero between launches).
  int glu_kind = 0;
  float* glu_out = nullptr;
  unsigned* counters = nullptr;
  int8_t* q = nullptr;
  float* d = nullptr;
  float* s = nullptr;
};

// The kEpilogueRopeKv fields of a RopeKvTail (the dp4a and the tensor-core
// q/k/v launches take the same).
inline DecodeEpilogue rope_kv_epilogue(const RopeKvTail& tail) {
  DecodeEpilogue e;
  e.kv = tail.kv;
  e.n_layer = tail.n_layer;
  e.layer = tail.layer;
  e.ring = tail.ring;
  e.head_dim = static_cast<uint32_t>(tail.head_dim);
  e.n_rot = static_cast<uint32_t>(tail.n_rot);
  e.positions = tail.positions;
  e.inv_freq = tail.inv_freq;
  e.position_scale = tail.position_scale;
  return e;
}

// RoPE's (cos, sin) for element `dim` (< n_rot) of a head at `position`, as
// rope_kernel takes them (double, rounded to float).
__device__ __forceinline__ float2 rope_angle(uint32_t dim, int32_t position, double position_scale,
                                             const double* inv_freq) {
  const double p = static_cast<double>(position) * position_scale;
  const double theta = p * inv_freq[dim / 2];
  return make_float2(static_cast<float>(cos(theta)), static_cast<float>(sin(theta)));
}

// The element rotated by RoPE as rope_kernel rotates it: `self` is element
// `dim` of its head, `other` the other element of its pair, cs its angle.
__device__ __forceinline__ float rope_rotate(float self, float other, uint32_t dim, float2 cs) {
  return dim % 2 == 0 ? self * cs.x - other * cs.y : other * cs.y + self * cs.x;
}

// Warp g of a target owns its weight rows [g * kWarpRows, (g + 1) *
// kWarpRows) for all kRows rows of x. Weight rows past n_out (the target's
// last warp's) read the last row and store nothing.
template <typename T, int kRows, int kWarpRows, int kUnroll, bool kWide, int kEpilogue>
__global__ void __launch_bounds__(kDecodeWarpsPerBlock * 32)
    matvec_decode_kernel(DecodeTargets targets, size_t row_bytes, int n_units, ActivationView x,
                         DecodeEpilogue epilogue) {
  const unsigned b = blockIdx.x;
  const BlockTarget bt = block_target(targets, b);
  const int p = bt.p;
  const uint8_t* w = bt.w;
  float* y = bt.y;
  const size_t n_out = bt.n_out, ld_y = bt.ld_y;
  const unsigned first = bt.first;
  const size_t n0 = (static_cast<size_t>(b - first) * kDecodeWarpsPerBlock + threadIdx.x / 32) * kWarpRows;
  // With an epilogue every warp reaches the block's barriers: a warp past
  // n_out (only in a target's last block) computes its clamped rows and
  // stores nothing.
  if constexpr (kEpilogue == kEpilogueNone) {
    if (n0 >= n_out) return;
  }
  const int lane = threadIdx.x % 32;
  const uint8_t* wrow[kWarpRows];
#pragma unroll
  for (int j = 0; j < kWarpRows; ++j) wrow[j] = w + (n0 + j < n_out ? n0 + j : n_out - 1) * row_bytes;
  ActRow act[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) act[r] = act_row(x, r);
  // The epilogue's RoPE angle of this thread's output, before the wait: no
  // kernel writes the positions or the frequencies (see rope_kernel), and
  // the double cos/sin would otherwise follow the matvec.
  float2 angle = make_float2(1.0f, 0.0f);
  if constexpr (kEpilogue == kEpilogueRopeKv) {
    constexpr int kBlockRows = kDecodeWarpsPerBlock * kWarpRows;
    const unsigned t = threadIdx.x;
    const size_t n = static_cast<size_t>(b - first) * kBlockRows + t % kBlockRows;
    const uint32_t dim = static_cast<uint32_t>(n % epilogue.head_dim);
    if (p < 2 && t < kRows * kBlockRows && n < n_out && dim < epilogue.n_rot) {
      angle = rope_angle(dim, epilogue.positions[t / kBlockRows], epilogue.position_scale, epilogue.inv_freq);
    }
  }
  float acc[kWarpRows][kRows];
  lane_sums<T, kRows, kWarpRows, kUnroll, kWide>(wrow, lane, n_units, act, acc);
  if constexpr (kEpilogue == kEpilogueNone) {
#pragma unroll
    for (int j = 0; j < kWarpRows; ++j) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float total = warp_sum(acc[j][r]);
        if (lane == 0 && n0 + j < n_out) y[r * ld_y + n0 + j] = total;
      }
    }
    return;
  } else {
    // The block's outputs (kRows x kBlockRows, the same sums) through shared
    // memory, so a thread can see both elements of a RoPE pair whichever
    // warps computed them.
    constexpr int kBlockRows = kDecodeWarpsPerBlock * kWarpRows;
    const size_t block_n0 = static_cast<size_t>(b - first) * kBlockRows;
    __shared__ float tile[kRows][kBlockRows];
#pragma unroll
    for (int j = 0; j < kWarpRows; ++j) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float total = warp_sum(acc[j][r]);
        if (lane == 0) tile[r][(threadIdx.x / 32) * kWarpRows + j] = total;
      }
    }
    __syncthreads();
    const unsigned t = threadIdx.x;
    const int r = static_cast<int>(t / kBlockRows);
    const size_t n = block_n0 + t % kBlockRows;
    const bool mine = t < kRows * kBlockRows && n < n_out;
    if constexpr (kEpilogue == kEpilogueRopeKv) {
      if (!mine) return;
      float out = tile[r][t % kBlockRows];
      const uint32_t dim = static_cast<uint32_t>(n % epilogue.head_dim);
      if (p < 2 && dim < epilogue.n_rot) {
        // The pair's other element is the neighbouring row (heads and the
        // block's rows start even), in the tile too.
        const float other = tile[r][(t % kBlockRows) ^ 1u];
        out = rope_rotate(out, other, dim, angle);
      }
      y[r * ld_y + n] = out;
      if (p >= 1 && epilogue.kv.writes[r] != 0) {
        const int32_t pos = epilogue.kv.positions[r];
        const size_t slot =
            epilogue.ring ? static_cast<size_t>(pos % epilogue.kv.ring_rows[r]) : static_cast<size_t>(pos);
        uint16_t* plane = const_cast<uint16_t*>(
            epilogue.kv.tables[r][p == 1 ? epilogue.layer : epilogue.n_layer + epilogue.layer]);
        plane[slot * n_out + n] = f32_to_f16_bits(out);
      }
    } else {
      static_assert(kEpilogue == kEpilogueGlu, "an epilogue this kernel does not know");
      static_assert(32 % kBlockRows == 0, "a block's rows lie in one group of 32 columns");
      if (mine) y[r * ld_y + n] = tile[r][t % kBlockRows];
      // Last block of the 32 columns in (its gate and up blocks): the fence
      // makes this block's outputs visible before its count; the last
      // block's fence orders its reads of the others' after their counts.
      __shared__ bool last;
      __threadfence();
      __syncthreads();
      const size_t group = block_n0 / 32;
      constexpr unsigned kArrivals = 2 * (32 / kBlockRows);
      unsigned* counter = epilogue.counters + group;
      if (t == 0) last = atomicAdd(counter, 1u) == kArrivals - 1;
      __syncthreads();
      if (!last) return;
      __threadfence();
      if (t == 0) *counter = 0u;  // ready for the next launch (graph replays reuse the counters)
      const int row = static_cast<int>(t / 32);
      if (row >= kRows) return;
      // Warp `row` makes block `group` of that row: the L2 copies of gate
      // and up (__ldcg, never a stale L1 line).
      const size_t col = group * 32 + lane;
      const float g = __ldcg(targets.y[0] + row * targets.ld_y[0] + col);
      const float u = __ldcg(targets.y[1] + row * targets.ld_y[1] + col);
      const float v = glu_value(epilogue.glu_kind, g, u);
      epilogue.glu_out[row * n_out + col] = v;
      const size_t block = row * (n_out / 32) + group;
      if (epilogue.s != nullptr) {
        quantize_block32<true>(v, lane, block, epilogue.q, epilogue.d, epilogue.s);
      } else {
        quantize_block32<false>(v, lane, block, epilogue.q, epilogue.d, nullptr);
      }
    }
  }
}

// The launch's targets, each owning ceil(n_out / block_rows) blocks;
// `aligned`: every row of every target starts 16-byte aligned (the wide
// loaders' condition).
struct LaunchTargets {
  DecodeTargets t{};
  unsigned blocks = 0;
  bool aligned = false;
};

inline LaunchTargets launch_targets(const MatvecTarget* targets, size_t count, size_t row_bytes, size_t block_rows) {
  LaunchTargets l;
  l.t = decode_targets(targets, count, block_rows, false, l.blocks);
  l.aligned = row_bytes % 16 == 0;
  for (size_t p = 0; p < count; ++p) l.aligned = l.aligned && reinterpret_cast<uintptr_t>(targets[p].w) % 16 == 0;
  return l;
}

template <typename T, int kRows, int kWarpRows, int kUnroll, int kEpilogue>
void launch_decode(const MatvecTarget* targets, size_t count, const ActivationView& x, bool wide,
                   const DecodeEpilogue& epilogue, cudaStream_t stream) {
  const size_t k = x.k;
  const size_t row_bytes = k / T::kBlockElems * T::kBlockBytes;
  const int n_units = static_cast<int>(k / 32);
  const LaunchTargets l =
      launch_targets(targets, count, row_bytes, static_cast<size_t>(kDecodeWarpsPerBlock) * kWarpRows);
  if (l.blocks == 0) return;
  bool launched = false;
  if constexpr (kHasWideLoader<T>) {
    if (wide && l.aligned) {
      launch_dependent(matvec_decode_kernel<T, kRows, kWarpRows, kUnroll, true, kEpilogue>, l.blocks,
                       kDecodeWarpsPerBlock * 32, 0, stream, l.t, row_bytes, n_units, x, epilogue);
      launched = true;
    }
  }
  if (!launched) {
    launch_dependent(matvec_decode_kernel<T, kRows, kWarpRows, kUnroll, false, kEpilogue>, l.blocks,
                     kDecodeWarpsPerBlock * 32, 0, stream, l.t, row_bytes, n_units, x, epilogue);
  }
  check_launch("matvec (decode)");
}

template <typename T, int kRows, int kEpilogue = kEpilogueNone>
bool launch_config(const DecodeConfig& c, const MatvecTarget* targets, size_t count, const ActivationView& x,
                   cudaStream_t stream, const DecodeEpilogue& epilogue = {}) {
  if (!decode_config_exists(c)) return false;
  if (c.warp_rows == 1) {
    launch_decode<T, kRows, 1, 1, kEpilogue>(targets, count, x, c.wide, epilogue, stream);
  } else if constexpr (T::kFormat == ActivationFormat::F32) {
    // A float unit is 32 registers: the larger configs would spill, so
    // float weights hold two units per lane at most.
    launch_decode<T, kRows, 2, 1, kEpilogue>(targets, count, x, c.wide, epilogue, stream);
  } else if (c.warp_rows == 2 && c.unroll == 1) {
    launch_decode<T, kRows, 2, 1, kEpilogue>(targets, count, x, c.wide, epilogue, stream);
  } else if (c.warp_rows == 2) {
    launch_decode<T, kRows, 2, 2, kEpilogue>(targets, count, x, c.wide, epilogue, stream);
  } else if (c.unroll == 1) {
    launch_decode<T, kRows, 4, 1, kEpilogue>(targets, count, x, c.wide, epilogue, stream);
  } else {
    launch_decode<T, kRows, 4, 2, kEpilogue>(targets, count, x, c.wide, epilogue, stream);
  }
  return true;
}

}  // namespace
}  // namespace muser::cuda
