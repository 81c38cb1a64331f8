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
// (K/4 rows of N x 4 bytes), so a block of a group is an 8 x 64 B tile once
// its quants are unpacked. Sixteen activation rows' 32 quant bytes of the
// same block make the A tile (16 x 32 B, the row stride in memory). The
// kernel makes each block of a run of groups into a signed B tile once per
// call and pass (the quants plus the type's offset: q - 8, q - 16, or Q8_0's
// stored q + 128 back to q), so TDPBSSD leaves in C, for every (activation
// row, weight row), the block's integer dot product itself. Integer sums are
// exact in any order, so that is the VNNI kernel's integer (which adds
// kOffset * sum(a) instead). The float steps that follow are the VNNI
// kernel's (and the scalar reference's):
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
// int8), B0/B1 (8 x 64 int8), two of each so consecutive blocks overlap.
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
  // a_stride apart) times B (8 x 64 signed bytes at b), in register set Set.
  template <int Set>
  void block_dot(const void* a, size_t a_stride, const void* b, int32_t* c_out) {
    const long stride = static_cast<long>(a_stride);
    if constexpr (Set == 0) {
      _tile_zero(0);
      _tile_loadd(2, a, stride);
      _tile_loadd(4, b, 64);
      _tile_dpbssd(0, 2, 4);
      _tile_stored(0, c_out, 64);
    } else {
      _tile_zero(1);
      _tile_loadd(3, a, stride);
      _tile_loadd(5, b, 64);
      _tile_dpbssd(1, 3, 5);
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
    const auto* b_bytes = static_cast<const int8_t*>(b);
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

constexpr size_t kBTileBytes = 512;  // one block of a group as a B tile: 8 rows of 64 bytes

// Block `block` of a group as a signed B tile at dst: chunk k of the sixteen
// rows is row k, each quant plus the type's offset (mod 256 for Q8_0's -128:
// the stored q + 128 becomes q again).
template <typename P>
static inline void signed_b_tile(const uint8_t* block, uint8_t* dst) {
  __m512i chunks[8];
  P::unpack(block, chunks);
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(P::kOffset));
  for (int k = 0; k < 8; ++k) {
    _mm512_store_si512(dst + 64 * k, P::kOffset != 0 ? _mm512_add_epi8(chunks[k], offset) : chunks[k]);
  }
}

// The float steps for one block: C (16 activation rows x 16 weight rows of
// the blocks' integer dots) into the sixteen running sums.
template <typename P>
static inline void add_block_terms(const int32_t* c, const uint8_t* block, const PackedActExtra* const* extra,
                                   size_t b, __m512* acc) {
  const __m512 dw = _mm512_cvtph_ps(load256(block));
  __m512 mw = _mm512_setzero_ps();
  if constexpr (P::kHasMin) mw = _mm512_cvtph_ps(load256(block + 2 * kPackedRows));
  for (size_t r = 0; r < kTileRows; ++r) {
    const PackedActExtra& ap = extra[r][b];
    const __m512i sumi = _mm512_load_si512(c + 16 * r);
    __m512 term = _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dw, _mm512_set1_ps(ap.d)));
    if constexpr (P::kHasMin) term = _mm512_add_ps(term, _mm512_mul_ps(mw, _mm512_set1_ps(ap.s)));
    acc[r] = _mm512_add_ps(acc[r], term);
  }
}

// Sixteen activation rows (from `act`, `act_row_bytes` apart) against one
// group's blocks [b_begin, b_end), whose signed B tiles are at `b_tiles`;
// results into the `lanes` of y[r * y_stride + 0..15]. The running sums
// start at +0 (b_begin == 0) or from what the previous pass left in y, so
// every sum adds its terms in block order as in one pass.
template <typename P, typename Tiles>
static void tile_group(Tiles& tiles, size_t b_begin, size_t b_end, const uint8_t* group, const uint8_t* b_tiles,
                       const uint8_t* act, size_t act_row_bytes, const PackedActExtra* const* extra, float* y,
                       size_t y_stride, __mmask16 lanes) {
  using Act = typename P::Act;
  constexpr size_t kBlockBytes = P::kHeadBytes + P::kQuantBytes;
  constexpr size_t kQs = offsetof(Act, qs);
  alignas(64) int32_t c0[kTileRows * 16];
  alignas(64) int32_t c1[kTileRows * 16];
  __m512 acc[kTileRows];
  for (size_t r = 0; r < kTileRows; ++r) {
    acc[r] = b_begin == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lanes, y + r * y_stride);
  }
  size_t b = b_begin;
  for (; b + 2 <= b_end; b += 2) {
    const uint8_t* tile = b_tiles + (b - b_begin) * kBTileBytes;
    tiles.template block_dot<0>(act + b * sizeof(Act) + kQs, act_row_bytes, tile, c0);
    tiles.template block_dot<1>(act + (b + 1) * sizeof(Act) + kQs, act_row_bytes, tile + kBTileBytes, c1);
    add_block_terms<P>(c0, group + b * kBlockBytes, extra, b, acc);
    add_block_terms<P>(c1, group + (b + 1) * kBlockBytes, extra, b + 1, acc);
  }
  if (b < b_end) {
    tiles.template block_dot<0>(act + b * sizeof(Act) + kQs, act_row_bytes, b_tiles + (b - b_begin) * kBTileBytes,
                                c0);
    add_block_terms<P>(c0, group + b * kBlockBytes, extra, b, acc);
  }
  for (size_t r = 0; r < kTileRows; ++r) _mm512_mask_storeu_ps(y + r * y_stride, lanes, acc[r]);
}

// PackedTileFn. Blocking, outermost first: passes over kPassBlocks blocks
// (a group's share is then at most 32 KB of B tiles); runs of groups whose
// B tiles fill the 64 KB scratch, made once per call and pass; 16-row
// activation tiles; the groups of the run. The scratch (on the stack: no
// allocation per call) stays in L1/L2 while every activation tile goes by.
template <typename P, typename Tiles>
static void amx_packed_tile(size_t n, const uint8_t* packed, size_t n_w_rows, const uint8_t* act,
                            size_t act_row_bytes, size_t n_act_rows, float* y, size_t y_stride) {
  constexpr size_t kPassBlocks = 64;
  constexpr size_t kScratchBytes = 64 * 1024;
  constexpr size_t kBlockBytes = P::kHeadBytes + P::kQuantBytes;
  static_assert(kScratchBytes >= 2 * kPassBlocks * kBTileBytes, "a run holds at least two groups");
  const size_t full = n_act_rows / kTileRows * kTileRows;
  if (full != 0) {
    const size_t nb = n / 32;
    const size_t group_bytes = packed_group_bytes<P>(n);
    const size_t n_groups = (n_w_rows + kPackedRows - 1) / kPackedRows;
    Tiles tiles;
    alignas(64) uint8_t scratch[kScratchBytes];
    const PackedActExtra* extra[kTileRows];
    for (size_t b0 = 0; b0 < nb; b0 += kPassBlocks) {
      const size_t b1 = nb - b0 < kPassBlocks ? nb : b0 + kPassBlocks;
      const size_t pass_tile_bytes = (b1 - b0) * kBTileBytes;
      const size_t run_groups = kScratchBytes / pass_tile_bytes;
      for (size_t g0 = 0; g0 < n_groups; g0 += run_groups) {
        const size_t g1 = n_groups - g0 < run_groups ? n_groups : g0 + run_groups;
        for (size_t g = g0; g < g1; ++g) {
          for (size_t b = b0; b < b1; ++b) {
            signed_b_tile<P>(packed + g * group_bytes + b * kBlockBytes,
                             scratch + (g - g0) * pass_tile_bytes + (b - b0) * kBTileBytes);
          }
        }
        for (size_t r0 = 0; r0 < full; r0 += kTileRows) {
          const uint8_t* rows = act + r0 * act_row_bytes;
          for (size_t r = 0; r < kTileRows; ++r) extra[r] = packed_act_extras<P>(rows + r * act_row_bytes, nb);
          for (size_t g = g0; g < g1; ++g) {
            tile_group<P>(tiles, b0, b1, packed + g * group_bytes, scratch + (g - g0) * pass_tile_bytes, rows,
                          act_row_bytes, extra, y + r0 * y_stride + g * kPackedRows, y_stride,
                          group_lanes(n_w_rows - g * kPackedRows));
          }
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

void amx_tiles_run() {
  // One configure / zero / release: what a CPU whose tile state the kernel
  // refuses faults on (SIGILL), run by isa.cpp in a child process.
  HardwareTiles tiles;
  _tile_zero(0);
}

}  // namespace muser::cpu
