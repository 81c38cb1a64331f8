// The AVX-512 VNNI table with AMX tile kernels for the prefill-sized calls of
// the packed 32-element-block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0). Compiled
// with AMX-TILE / AMX-INT8 on top of the VNNI flags (see CMakeLists.txt) and
// reached only through kernel_set() after isa.cpp found the tiles usable:
// the CPU reports them, the kernel granted this process the tile state
// (arch_prctl), and a child process ran a tile instruction without a fault.
//
// Why the results are the VNNI table's bit for bit. The packed layout keeps,
// per 32-element block, chunk k of sixteen weight rows in one 64-byte line
// (row i's 4 quant bytes at 4i): that line is row k of an AMX B tile
// (K/4 rows of N x 4 bytes), so a block of a group is an 8 x 64 B tile as
// stored (Q8_0) or once its nibbles are split (Q4 / Q5). Sixteen activation
// rows' 32 quant bytes of the same block make the A tile (16 x 32 B, the row
// stride in memory). TDPBSUD (signed activation bytes times unsigned weight
// bytes) leaves in C, for every (activation row, weight row), the block's
// integer dot product without the weights' offset; integer sums are exact in
// any order, so adding kOffset * sum(a) gives the VNNI kernel's integer. The
// float steps that follow are the VNNI kernel's (and the scalar reference's):
//   sum += float(sumi) * (d_w * d_a)              [+ m_w * s_a for Q4_1 / Q5_1]
// in block order from +0, one accumulator per (activation row, weight row).
//
// Calls of fewer than 16 activation rows (decode groups) and the last
// n_act_rows % 16 rows of a call go to the VNNI kernels, so every row's bits
// are the same whichever path computed them.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "backend/cpu/kernel_set.h"
#include "tensor/half_float.h"
#include "tensor/quant_blocks.h"

namespace muser::cpu {
namespace {

#include "backend/cpu/x86_kernels_256.inc"
#include "backend/cpu/x86_kernels_512.inc"
#include "backend/cpu/x86_kernels_512_packed.inc"

constexpr size_t kTileRows = 16;  // activation rows per A tile (and C rows)

// The tile registers the kernel uses: C0/C1 (16 x 16 int32), A0/A1 (16 x 32
// int8), B0/B1 (8 x 64 uint8), two of each so consecutive blocks overlap.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 32, 32, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 8, 8};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");
// Constant-initialized: the probe child of isa.cpp loads it too, and must not
// meet a function-local static's guard (another thread may have held it when
// the child was cloned).
constexpr TileConfig kTileConfig{};

// The AMX instructions themselves. GCC's tile intrinsics paste the tile
// number into the assembly text, so each of the two register sets is spelled
// out. Constructing one loads the configuration; destroying it releases the
// tile state (RAII: the thread does not carry 8 KB of tile state through
// every context switch after the call).
class HardwareTiles {
 public:
  HardwareTiles() { _tile_loadconfig(&kTileConfig); }
  ~HardwareTiles() { _tile_release(); }
  HardwareTiles(const HardwareTiles&) = delete;
  HardwareTiles& operator=(const HardwareTiles&) = delete;

  // c_out (16 x 16 int32, 64 B rows) = A (16 rows of 32 signed bytes at a,
  // a_stride apart) times B (8 x 64 unsigned bytes at b), in register set Set.
  template <int Set>
  void block_dot(const void* a, size_t a_stride, const void* b, int32_t* c_out) {
    const long stride = static_cast<long>(a_stride);
    if constexpr (Set == 0) {
      _tile_zero(0);
      _tile_loadd(2, a, stride);
      _tile_loadd(4, b, 64);
      _tile_dpbsud(0, 2, 4);
      _tile_stored(0, c_out, 64);
    } else {
      _tile_zero(1);
      _tile_loadd(3, a, stride);
      _tile_loadd(5, b, 64);
      _tile_dpbsud(1, 3, 5);
      _tile_stored(1, c_out, 64);
    }
  }
};

// The same operations in plain C++ (tests only: avx512amx_emulated_kernel_set
// runs the tile kernel's data movement and epilogue on CPUs without AMX).
class EmulatedTiles {
 public:
  template <int Set>
  void block_dot(const void* a, size_t a_stride, const void* b, int32_t* c_out) {
    const auto* b_bytes = static_cast<const uint8_t*>(b);
    for (size_t m = 0; m < kTileRows; ++m) {
      const auto* a_row = static_cast<const int8_t*>(a) + m * a_stride;
      for (size_t n = 0; n < 16; ++n) {
        int32_t sum = 0;
        for (size_t k = 0; k < 8; ++k) {
          for (size_t j = 0; j < 4; ++j) {
            sum += static_cast<int32_t>(a_row[4 * k + j]) * static_cast<int32_t>(b_bytes[64 * k + 4 * n + j]);
          }
        }
        c_out[16 * m + n] = sum;
      }
    }
  }
};

// Block b of a group as an 8 x 64 B tile: Q8_0's stored chunks are one
// already; the others are unpacked into `scratch`.
template <typename P>
static const uint8_t* block_b_tile(const uint8_t* block, uint8_t* scratch) {
  if constexpr (std::is_same_v<P, PackedQ8_0>) {
    return block + P::kHeadBytes;
  } else {
    __m512i chunks[8];
    P::unpack(block, chunks);
    for (int k = 0; k < 8; ++k) _mm512_store_si512(scratch + 64 * k, chunks[k]);
    return scratch;
  }
}

// The float steps for one block: C (16 activation rows x 16 weight rows of
// integer dots without the offset) into the sixteen running sums.
template <typename P>
static inline void add_block_terms(const int32_t* c, const uint8_t* block, const PackedActExtra* const* extra,
                                   size_t b, __m512* acc) {
  const __m512 dw = _mm512_cvtph_ps(load256(block));
  __m512 mw = _mm512_setzero_ps();
  if constexpr (P::kHasMin) mw = _mm512_cvtph_ps(load256(block + 2 * kPackedRows));
  for (size_t r = 0; r < kTileRows; ++r) {
    const PackedActExtra& ap = extra[r][b];
    __m512i sumi = _mm512_load_si512(c + 16 * r);
    if constexpr (P::kOffset != 0) sumi = _mm512_add_epi32(sumi, _mm512_set1_epi32(P::kOffset * ap.sum));
    __m512 term = _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dw, _mm512_set1_ps(ap.d)));
    if constexpr (P::kHasMin) term = _mm512_add_ps(term, _mm512_mul_ps(mw, _mm512_set1_ps(ap.s)));
    acc[r] = _mm512_add_ps(acc[r], term);
  }
}

// Sixteen activation rows (from `act`, `act_row_bytes` apart) against one
// group, every block; results into the `lanes` of y[r * y_stride + 0..15].
template <typename P, typename Tiles>
static void tile_group(Tiles& tiles, size_t nb, const uint8_t* group, const uint8_t* act, size_t act_row_bytes,
                       const PackedActExtra* const* extra, float* y, size_t y_stride, __mmask16 lanes) {
  using Act = typename P::Act;
  constexpr size_t kBlockBytes = P::kHeadBytes + P::kQuantBytes;
  constexpr size_t kQs = offsetof(Act, qs);
  alignas(64) int32_t c0[kTileRows * 16];
  alignas(64) int32_t c1[kTileRows * 16];
  alignas(64) uint8_t b0[512];
  alignas(64) uint8_t b1[512];
  __m512 acc[kTileRows];
  for (size_t r = 0; r < kTileRows; ++r) acc[r] = _mm512_setzero_ps();
  size_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* block0 = group + b * kBlockBytes;
    const uint8_t* block1 = block0 + kBlockBytes;
    tiles.template block_dot<0>(act + b * sizeof(Act) + kQs, act_row_bytes, block_b_tile<P>(block0, b0), c0);
    tiles.template block_dot<1>(act + (b + 1) * sizeof(Act) + kQs, act_row_bytes,
                                      block_b_tile<P>(block1, b1), c1);
    add_block_terms<P>(c0, block0, extra, b, acc);
    add_block_terms<P>(c1, block1, extra, b + 1, acc);
  }
  if (b < nb) {
    const uint8_t* block = group + b * kBlockBytes;
    tiles.template block_dot<0>(act + b * sizeof(Act) + kQs, act_row_bytes, block_b_tile<P>(block, b0), c0);
    add_block_terms<P>(c0, block, extra, b, acc);
  }
  for (size_t r = 0; r < kTileRows; ++r) _mm512_mask_storeu_ps(y + r * y_stride, lanes, acc[r]);
}

// PackedTileFn. Blocking: groups in runs of about 256 KB (they stay in L2
// while every 16-row activation tile of the call goes by), activation tiles,
// then the groups of the run.
template <typename P, typename Tiles>
static void amx_packed_tile(size_t n, const uint8_t* packed, size_t n_w_rows, const uint8_t* act,
                            size_t act_row_bytes, size_t n_act_rows, float* y, size_t y_stride) {
  constexpr size_t kWeightRunBytes = 256 * 1024;
  const size_t full = n_act_rows / kTileRows * kTileRows;
  if (full != 0) {
    const size_t nb = n / 32;
    const size_t group_bytes = packed_group_bytes<P>(n);
    const size_t n_groups = (n_w_rows + kPackedRows - 1) / kPackedRows;
    const size_t run_groups = group_bytes >= kWeightRunBytes ? 1 : kWeightRunBytes / group_bytes;
    Tiles tiles;
    const PackedActExtra* extra[kTileRows];
    for (size_t g0 = 0; g0 < n_groups; g0 += run_groups) {
      const size_t g1 = n_groups - g0 < run_groups ? n_groups : g0 + run_groups;
      for (size_t r0 = 0; r0 < full; r0 += kTileRows) {
        const uint8_t* rows = act + r0 * act_row_bytes;
        for (size_t r = 0; r < kTileRows; ++r) extra[r] = packed_act_extras<P>(rows + r * act_row_bytes, nb);
        for (size_t g = g0; g < g1; ++g) {
          const size_t left = n_w_rows - g * kPackedRows;
          const __mmask16 lanes = left >= kPackedRows ? static_cast<__mmask16>(0xffff)
                                                      : static_cast<__mmask16>((1u << left) - 1);
          tile_group<P>(tiles, nb, packed + g * group_bytes, rows, act_row_bytes, extra,
                        y + r0 * y_stride + g * kPackedRows, y_stride, lanes);
        }
      }
    }
  }
  if (full < n_act_rows) {
    packed_tile<P>(n, packed, n_w_rows, act + full * act_row_bytes, act_row_bytes, n_act_rows - full,
                   y + full * y_stride, y_stride);
  }
}

template <typename P, typename Tiles>
constexpr PackedKernel amx_packed_kernel() {
  return PackedKernel{packed_group_bytes<P>, pack_group<P>, amx_packed_tile<P, Tiles>};
}

template <typename Tiles>
constexpr KernelSet make_avx512amx_set() {
  KernelSet set = make_avx512_set(Isa::Avx512Amx);
  set_packed_kernels(set);
  set.packed[2] = amx_packed_kernel<PackedQ4_0, Tiles>();
  set.packed[3] = amx_packed_kernel<PackedQ4_1, Tiles>();
  set.packed[6] = amx_packed_kernel<PackedQ5_0, Tiles>();
  set.packed[7] = amx_packed_kernel<PackedQ5_1, Tiles>();
  set.packed[8] = amx_packed_kernel<PackedQ8_0, Tiles>();
  return set;
}

constexpr KernelSet kSet = make_avx512amx_set<HardwareTiles>();
constexpr KernelSet kEmulatedSet = make_avx512amx_set<EmulatedTiles>();

}  // namespace

const KernelSet& avx512amx_kernel_set() { return kSet; }
const KernelSet& avx512amx_emulated_kernel_set() { return kEmulatedSet; }

bool amx_tiles_run() {
  // One configure / zero / release: what a CPU whose tile state the kernel
  // refuses faults on (SIGILL), run by isa.cpp in a child process.
  HardwareTiles tiles;
  _tile_zero(0);
  return true;
}

}  // namespace muser::cpu
