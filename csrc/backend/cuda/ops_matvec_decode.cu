// The decode matvec: a group of 1..4 activation rows times a quantized
// weight matrix, the step a decode group spends most of its time in.
//
// Every output is computed as the prefill kernel (ops_matvec.cu) computes it:
// lane l of one warp sums T::dot of units l, l + 32, ... of the weight row in
// increasing order, then warp_sum folds the 32 lanes in its fixed butterfly.
// What differs is only which warp computes which outputs and how loads are
// shared, so a row's bits do not depend on the config, the group or the tile:
//   - a warp computes `warp_rows` consecutive weight rows for all rows of the
//     group, so each lane reads a unit's activations once for all those
//     weight rows (the compiler merges the identical loads of the inlined
//     T::dot calls, which store nothing in between) instead of once per
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
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/activation_rows.cuh"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
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

// Q4_0 from a 16-byte aligned row: block u's 18 bytes start at byte
// rel = 18u % 16 of the 32-byte aligned window at 18u - rel (rel <= 14, so
// the block ends inside the window, and the window inside the row).
template <>
struct UnitLoader<TypeQ4_0, true> {
  __device__ static void load(const uint8_t* row, int u, TypeQ4_0::Unit& w) {
    const int off = TypeQ4_0::kBlockBytes * u;
    const uint4* p = reinterpret_cast<const uint4*>(row + (off & ~15));
    const uint4 a = __ldg(p), b = __ldg(p + 1);
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

// Up to kMaxDecodeTargets matrices that read the same activations (a
// layer's q, k and v; gate and up), launched as one grid: target p owns
// blocks [first_block[p], first_block[p + 1]).
struct DecodeTargets {
  const uint8_t* w[kMaxDecodeTargets];
  float* y[kMaxDecodeTargets];
  size_t n_out[kMaxDecodeTargets];
  size_t ld_y[kMaxDecodeTargets];
  unsigned first_block[kMaxDecodeTargets + 1];
};

// Warp g of a target owns its weight rows [g * kWarpRows, (g + 1) *
// kWarpRows) for all kRows rows of x. Weight rows past n_out (the target's
// last warp's) read the last row and store nothing.
template <typename T, int kRows, int kWarpRows, int kUnroll, bool kWide>
__global__ void __launch_bounds__(kDecodeWarpsPerBlock * 32)
    matvec_decode_kernel(DecodeTargets targets, size_t row_bytes, int n_units, ActivationView x) {
  // The block's target, by selects (a dynamic index into the parameter
  // arrays would go through local memory).
  const unsigned b = blockIdx.x;
  const int p = b >= targets.first_block[1] ? (b >= targets.first_block[2] ? 2 : 1) : 0;
  static_assert(kMaxDecodeTargets == 3, "the selects below name three targets");
  const uint8_t* w = p == 0 ? targets.w[0] : p == 1 ? targets.w[1] : targets.w[2];
  float* y = p == 0 ? targets.y[0] : p == 1 ? targets.y[1] : targets.y[2];
  const size_t n_out = p == 0 ? targets.n_out[0] : p == 1 ? targets.n_out[1] : targets.n_out[2];
  const size_t ld_y = p == 0 ? targets.ld_y[0] : p == 1 ? targets.ld_y[1] : targets.ld_y[2];
  const unsigned first = p == 0 ? targets.first_block[0] : p == 1 ? targets.first_block[1] : targets.first_block[2];
  const size_t n0 = (static_cast<size_t>(b - first) * kDecodeWarpsPerBlock + threadIdx.x / 32) * kWarpRows;
  if (n0 >= n_out) return;
  const int lane = threadIdx.x % 32;
  const uint8_t* wrow[kWarpRows];
#pragma unroll
  for (int j = 0; j < kWarpRows; ++j) wrow[j] = w + (n0 + j < n_out ? n0 + j : n_out - 1) * row_bytes;
  ActRow act[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) act[r] = act_row(x, r);
  float acc[kWarpRows][kRows];
#pragma unroll
  for (int j = 0; j < kWarpRows; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[j][r] = 0.0f;
  }
  // Nothing read before dependent_launch_begin() is written by an earlier
  // kernel (weights are uploaded once), so under programmatic dependent
  // launch a lane's first weight loads are in flight while the previous
  // kernel finishes; the activations are read only after the wait. Launched
  // normally, the wait and the trigger return at once. A lane without units
  // (short rows) has nothing to load first.
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
    // Units in increasing order per output, as the prefill kernel sums them.
#pragma unroll
    for (int s = 0; s < kUnroll; ++s) {
      const int u = base + 32 * s;
      if (u < n_units) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int j = 0; j < kWarpRows; ++j) acc[j][r] += T::dot(unit[s][j], act[r], u);
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kWarpRows; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float total = warp_sum(acc[j][r]);
      if (lane == 0 && n0 + j < n_out) y[r * ld_y + n0 + j] = total;
    }
  }
}

template <typename T, int kRows, int kWarpRows, int kUnroll>
void launch_decode(const MatvecTarget* targets, size_t count, const ActivationView& x, bool wide,
                   cudaStream_t stream) {
  const size_t k = x.k;
  const size_t row_bytes = k / T::kBlockElems * T::kBlockBytes;
  const int n_units = static_cast<int>(k / 32);
  DecodeTargets t{};
  unsigned blocks = 0;
  bool aligned = row_bytes % 16 == 0;
  for (size_t p = 0; p < kMaxDecodeTargets; ++p) {
    t.first_block[p] = blocks;
    if (p < count) {
      t.w[p] = static_cast<const uint8_t*>(targets[p].w);
      t.y[p] = targets[p].y;
      t.n_out[p] = targets[p].n_out;
      t.ld_y[p] = targets[p].ld_y;
      aligned = aligned && reinterpret_cast<uintptr_t>(targets[p].w) % 16 == 0;
      blocks += ceil_div(targets[p].n_out, static_cast<size_t>(kDecodeWarpsPerBlock) * kWarpRows);
    }
  }
  t.first_block[kMaxDecodeTargets] = blocks;  // targets past count own no block
  if (blocks == 0) return;
  bool launched = false;
  if constexpr (kHasWideLoader<T>) {
    if (wide && aligned) {
      launch_dependent(matvec_decode_kernel<T, kRows, kWarpRows, kUnroll, true>, blocks,
                       kDecodeWarpsPerBlock * 32, 0, stream, t, row_bytes, n_units, x);
      launched = true;
    }
  }
  if (!launched) {
    launch_dependent(matvec_decode_kernel<T, kRows, kWarpRows, kUnroll, false>, blocks,
                     kDecodeWarpsPerBlock * 32, 0, stream, t, row_bytes, n_units, x);
  }
  check_launch("matvec (decode)");
}

template <typename T, int kRows>
bool launch_config(const DecodeConfig& c, const MatvecTarget* targets, size_t count, const ActivationView& x,
                   cudaStream_t stream) {
  if (!decode_config_exists(c)) return false;
  if (c.warp_rows == 1) {
    launch_decode<T, kRows, 1, 1>(targets, count, x, c.wide, stream);
  } else if constexpr (T::kFormat == ActivationFormat::F32) {
    // A float unit is 32 registers: the larger configs would spill, so
    // float weights hold two units per lane at most.
    launch_decode<T, kRows, 2, 1>(targets, count, x, c.wide, stream);
  } else if (c.warp_rows == 2 && c.unroll == 1) {
    launch_decode<T, kRows, 2, 1>(targets, count, x, c.wide, stream);
  } else if (c.warp_rows == 2) {
    launch_decode<T, kRows, 2, 2>(targets, count, x, c.wide, stream);
  } else if (c.unroll == 1) {
    launch_decode<T, kRows, 4, 1>(targets, count, x, c.wide, stream);
  } else {
    launch_decode<T, kRows, 4, 2>(targets, count, x, c.wide, stream);
  }
  return true;
}

}  // namespace

bool decode_config_exists(const DecodeConfig& c) {
  return (c.warp_rows == 1 && c.unroll == 1) ||
         ((c.warp_rows == 2 || c.warp_rows == 4) && (c.unroll == 1 || c.unroll == 2));
}

DecodeConfig decode_config(DType type, size_t n_out, size_t n_rows) {
  // Measured on the H200 (benchmarks/bench_cuda_matvec.py, llama3-8b shapes,
  // Q4_0 and Q4_K): one weight row per warp, one unit at a time, is fastest
  // on small matrices (k/v: 1024 rows) and as fast as any on 4096-row ones
  // at 1..2 rows; two rows per warp with two units each lane in flight wins
  // on the large ones (gate/up, output: 83% of 4.3 TB/s at 1 row against
  // 71%) and on 4096-row ones at 3..4 rows, where sharing each activation
  // load between weight rows starts to count. Q4_K gains from it from 2048
  // rows on and prefers four rows per warp at 3..4 rows. Unrolling one row
  // four units deep was slower everywhere (so that config is gone).
  //
  // Refined from a run of every config per shape (device call s6-1, Q4_0
  // and Q4_K; the other types keep the rule above until measured): one unit
  // per lane in flight beats two on the largest matrices, where many warps
  // already cover the latency: the output projection (128,256 rows) at any
  // row count (Q4_0 1 row 71 us against 80, 4 rows 114 against 127; Q4_K
  // 74 against 98 and 116 against 179), and gate/up together (28,672 rows)
  // at 2..4 rows (Q4_0 4 rows 16 us against 20 per matrix, Q4_K with four
  // rows per warp 17 against 24). Four rows per warp, two units, wins on
  // the 4,096-row matrices at 3..4 rows for Q4_0 (down 22 us against 26,
  // q/o 6.7 against 7.6) and at 2 rows for Q4_K (18 against 19, 5.5
  // against 5.9).
  DecodeConfig c;
  c.wide = true;
  const bool q4k = type == DType::Q4_K;
  if (type == DType::Q4_0 || q4k) {
    if (n_out >= 65536) {
      c.warp_rows = n_rows >= 3 ? 4 : 2;
      return c;
    }
    if (n_out >= 8192 && n_rows >= 2) {
      c.warp_rows = q4k ? 4 : 2;
      return c;
    }
    if (n_out >= 4096 && ((!q4k && n_rows >= 3) || (q4k && n_rows == 2))) {
      c.warp_rows = 4;
      c.unroll = 2;
      return c;
    }
  }
  const size_t large = n_rows <= 2 && !q4k ? 8192 : 2048;
  if (n_out < large) return c;  // 1 x 1
  c.warp_rows = q4k && n_rows >= 3 ? 4 : 2;
  c.unroll = 2;
  return c;
}

void matvec_decode(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                   const DecodeConfig& config, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (n_rows < 1 || n_rows > 4) {
    throw InternalError("[cuda matvec] the decode kernel takes 1..4 rows, got " + std::to_string(n_rows));
  }
  if (count < 1 || count > kMaxDecodeTargets) {
    throw InternalError("[cuda matvec] the decode kernel takes 1.." + std::to_string(kMaxDecodeTargets) +
                        " matrices, got " + std::to_string(count));
  }
  if (!decode_config_exists(config)) {
    throw InvalidArgument("[cuda matvec] no decode kernel with " + std::to_string(config.warp_rows) +
                          " weight rows per warp and " + std::to_string(config.unroll) + " units per lane");
  }
  bool ok = false;
  const bool typed = dispatch_type(type, [&]<typename T>() {
    switch (n_rows) {
      case 1: ok = launch_config<T, 1>(config, targets, count, x, stream); break;
      case 2: ok = launch_config<T, 2>(config, targets, count, x, stream); break;
      case 3: ok = launch_config<T, 3>(config, targets, count, x, stream); break;
      default: ok = launch_config<T, 4>(config, targets, count, x, stream); break;
    }
  });
  if (!typed || !ok) {
    throw InternalError(std::string("[cuda matvec] no decode kernel for type ") + dtype_info(type).name);
  }
}

}  // namespace muser::cuda
