// The CPU's per-instruction-set kernel tables and the run-time choice between
// them. A table is immutable static data; which tables this CPU may use is
// decided once (function-local static) and never changes afterwards.
//
// This header is included by the *_avx2.cpp / *_avx512*.cpp / *_neon.cpp
// files, so it holds declarations and plain data only (no inline code that
// the linker could share with baseline-ISA translation units).
#pragma once

#include <cstddef>
#include <cstdint>

namespace muser::cpu {

// x86-64: Avx512 means F/BW/VL/DQ; Avx512Vnni adds the VNNI int8 dot
// product; Avx512Amx adds the AMX int8 tiles (usable only once the kernel
// grants the process their state: isa.cpp asks, then tries them). arm64:
// Neon is the baseline Advanced SIMD every arm64 CPU has; NeonDotprod adds
// SDOT (FEAT_DotProd), NeonI8mm adds SMMLA (FEAT_I8MM).
enum class Isa : uint32_t { Scalar, Avx2, Avx512, Avx512Vnni, Avx512Amx, Neon, NeonDotprod, NeonI8mm };

// Every instruction set, slowest first within each architecture.
constexpr Isa kAllIsas[] = {Isa::Scalar,    Isa::Avx2, Isa::Avx512,      Isa::Avx512Vnni,
                            Isa::Avx512Amx, Isa::Neon, Isa::NeonDotprod, Isa::NeonI8mm};

// Computes a tile of weight-row x activation-row dot products:
//
//   y[r * y_stride + o] = dot(weight row o, activation row r)
//   for o < n_w_rows, r < n_act_rows
//
// n: elements per row (a block multiple of the weight type); w: n_w_rows rows
// of w_row_bytes each; act: n_act_rows activation rows (in the weight type's
// ActivationFormat) of act_row_bytes each.
//
// Contract every implementation keeps: the value written for (o, r) depends
// only on those two rows, never on the tile's shape or the element's position
// in it (the batch invariance of matmul rests on this).
using TileFn = void (*)(size_t n, const uint8_t* w, size_t w_row_bytes, size_t n_w_rows,
                        const uint8_t* act, size_t act_row_bytes, size_t n_act_rows, float* y,
                        size_t y_stride);

// Quantizes one float32 activation row of n elements into dst, in one of
// the ActivationFormats (tensor/reference_kernels.h). Every implementation
// writes exactly the bytes ref::quantize_activation_row writes.
using QuantizeFn = void (*)(const float* x, uint8_t* dst, size_t n);

// Tile entries are indexed by ggml type id (null for unsupported ids);
// quantize entries by ActivationFormat (F32, Q8_0, Q8_1, Q8_K).
constexpr uint32_t kMaxTypeId = 32;
constexpr uint32_t kActivationFormats = 4;

// Weight rows a packed layout interleaves into one group (matmul splits
// output rows in multiples of this).
constexpr size_t kPackedRows = 16;

// Decode-sized calls: at most this many activation rows. The packed tiles
// read several weight groups side by side for them (one memory stream per
// group; x86_kernels_512_packed_gemv.inc says why), and matmul cuts such
// calls into chunks of whole runs of gemv_streams() groups.
constexpr size_t kGemvMaxRows = 4;
constexpr size_t kMaxGemvStreams = 4;

// Groups read side by side, 1..kMaxGemvStreams: four on Intel, one on AMD
// (isa.cpp has the measurements). Intel's L2 streamer runs at most ~20 lines
// ahead of one stream and stops at 4 KB pages, so one stream does not fill a
// core's outstanding misses; AMD's prefetchers follow one stream further, and
// there four streams only add conflicts. Results never depend on it.
size_t gemv_streams();
// Overrides gemv_streams() for the whole process (tests and benchmarks
// compare the choices; 0 restores the CPU's default) and returns the
// previous value. Not to be called while matmuls run.
size_t set_gemv_streams(size_t streams);

// Whether this CPU runs 512-bit operations as two 256-bit halves (AMD Zen 4,
// family 19h): there 16-lane code only pays off where it cuts instructions,
// not where it only widens them (f16_vec_ops() keeps the AVX2 attention
// table on such CPUs).
bool splits_512bit_ops();

// What a packed tile reads beside each Q8_0 / Q8_1 activation block, worked
// out once per activation row when the row is quantized for a packed job
// (MatmulJob::quantize_rows) rather than by every tile and block of weight
// groups that meets the row: at 16 threads a tile may hold a single group,
// and recomputing the sums then cost more than the dot products. The nb
// entries follow the row's blocks at byte offset
//   align_up(nb * sizeof(block), kPackedActExtraAlign)
// and the row's stride (act_row_bytes) covers them.
struct PackedActExtra {
  float d;  // the block's fp16 d as float32 (exact)
  union {
    int32_t sum;  // Q8_0 blocks: the sum of the 32 quants
    float s;      // Q8_1 blocks: the block's fp16 s as float32
  };
};
static_assert(sizeof(PackedActExtra) == 8, "two 4-byte fields");
constexpr size_t kPackedActExtraAlign = 8;

// A packed tile: like TileFn, but the weights are in the table's packed
// layout for the type, `packed` points at the group that holds the tile's
// first weight row (a multiple of kPackedRows), and n_w_rows results are
// written per activation row. Q8_0 / Q8_1 activation rows carry their
// PackedActExtra entries (above). Same contract as TileFn.
using PackedTileFn = void (*)(size_t n, const uint8_t* packed, size_t n_w_rows, const uint8_t* act,
                              size_t act_row_bytes, size_t n_act_rows, float* y, size_t y_stride);

// A weight layout a table repacks a type into once, at load (see
// packed_weights.h), because its kernels run faster on it than on the GGUF
// blocks. Only present (group_bytes != null) for the types and instruction
// sets that gain.
struct PackedKernel {
  // Bytes of one group of kPackedRows rows of n elements.
  size_t (*group_bytes)(size_t n);
  // Packs rows [0, n_w_rows) (at most kPackedRows, w_row_bytes apart, GGUF
  // blocks) into one group at dst; missing rows are zero-filled.
  void (*pack_group)(size_t n, const uint8_t* w, size_t w_row_bytes, size_t n_w_rows, uint8_t* dst);
  PackedTileFn tile;
};

struct KernelSet {
  Isa isa;
  TileFn tile[kMaxTypeId];
  QuantizeFn quantize[kActivationFormats];
  PackedKernel packed[kMaxTypeId];
};

// The kernel tables, one per instruction set. Only call the SIMD ones after
// isa_supported() said yes.
const KernelSet& scalar_kernel_set();
const KernelSet& avx2_kernel_set();
const KernelSet& avx512_kernel_set();
const KernelSet& avx512vnni_kernel_set();
const KernelSet& avx512amx_kernel_set();
// Tests only: the AMX table with its tile instructions done in plain C++, so
// its data movement and float steps run (and are checked) on CPUs without
// AMX. Needs AVX-512 VNNI.
const KernelSet& avx512amx_emulated_kernel_set();
// Configures, zeroes and releases one tile (isa.cpp runs it in a child
// process to see that the CPU really executes AMX before choosing it).
void amx_tiles_run();
const KernelSet& neon_kernel_set();
const KernelSet& neon_dotprod_kernel_set();
const KernelSet& neon_i8mm_kernel_set();

const char* isa_name(Isa isa);
// Whether this CPU (and this build) can run `isa`. Scalar always can.
bool isa_supported(Isa isa);
// The fastest supported instruction set, decided on first use.
Isa best_isa();
// The table for `isa`; throws InvalidArgument when this CPU cannot run it.
const KernelSet& kernel_set(Isa isa);
// Parses "scalar" / "avx2" / "avx512" / "avx512vnni" / "avx512amx" / "neon" / "neon_dotprod" /
// "neon_i8mm" / "best" (an isa_name or "best"); throws InvalidArgument for
// other names and for instruction sets this CPU cannot run.
Isa parse_isa(const char* name);
// Tests: the table parse_isa(name) names, or for "avx512amx_emulated" the
// emulated AMX table (on CPUs with AVX-512 VNNI; InvalidArgument elsewhere).
const KernelSet& testing_kernel_set(const char* name);

}  // namespace muser::cpu
