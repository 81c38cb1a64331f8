// Parts of the tensor-core prefill GEMM shared by its kernel versions
// (ops_gemm_mma.cu holds gemm_mma and why the walk is bitwise the matvec's;
// ops_gemm_mma_packed.cu the kernel on packed copies, the Q4_0 default;
// ops_gemm_mma_v1.cu the first version, on the GGUF blocks): the block tile
// and stage sizes, the class walk, the pairwise tree stack, shared-memory
// layout helpers, ldmatrix and the int8 MMA (cp.async: cp_async.cuh).
#pragma once

#include <cstdint>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/weight_units.cuh"

namespace muser::cuda::gemm {

constexpr int kTileRows = 64;   // activation rows per block
constexpr int kTileOut = 64;    // weight rows (outputs) per block
constexpr int kStageUnits = 8;  // units per shared-memory stage

// One (64-output tile, stage) chunk of packed Q4_0 weights (written once at
// upload by gemm_pack_weights; read by the packed GEMM and by the decode
// matvec on the tensor cores, ops_matvec_decode_mma.cu):
//   q   [64 outputs][4 words t][8 slots]  word t of the block's 16 nibble
//       bytes (low nibbles: elements 4t..4t+3, high: 16+4t..), each nibble
//       q as q ^ 8, which is what lane t of the MMA's B fragment holds (b0
//       low, b1 high; packed_low_bytes, packed_high_bytes)
//   d   [8 n8 tiles][4 slot pairs][4 t]{d, d', d_next, d_next'}  the fp16
//       scales widened and divided by 16 (q4_0_scale's c), of outputs 2 t
//       and 2 t + 1 of the tile
// Q4_K's chunks (the GEMM's only) hold the sub-block's 32 nibbles in the
// same words, plain (q, not q ^ 8), then two scale sets in d's layout: d sc
// / 16 (q4_k_scale's c), then d_min mn (ops_gemm_mma_packed.cu).
// A 64-output tile's stages follow each other: tile i's chunk of stage s
// starts at (i * n_stages + s) * kWChunk (w_chunk_bytes for Q4_K's).
constexpr int kWQBytes = kTileOut * kStageUnits * 16;
constexpr int kScaleSetBytes = kTileOut * kStageUnits * 4;  // one float per (output, slot)
__host__ __device__ constexpr int w_chunk_bytes(int scale_sets) { return kWQBytes + scale_sets * kScaleSetBytes; }
constexpr int kWChunk = w_chunk_bytes(1);

// The warp grid of both kernels (v1 and packed): 8 warps, 2 along rows x 4
// along outputs, each 32 rows x 16 outputs as 2 (m16) x 2 (n8) MMA tiles,
// so 16 outputs per thread.
constexpr int kThreads = 256;
constexpr int kWarpRows = 32, kWarpOut = 16;
constexpr int kOutputs = 16;

// Stores one thread's kOutputs totals of the warp tile whose first row and
// output are row0 and out0: acc[(mi * 2 + ni) * 4 + c] is row 16 mi + g +
// 8 (c >> 1), output 8 ni + 2 t + (c & 1) of the tile (the MMA's C layout,
// g = lane / 4, t = lane % 4); rows and outputs past the matrix are skipped.
__device__ __forceinline__ void store_warp_outputs(const float (&acc)[kOutputs], size_t row0, size_t out0, int g,
                                                   int t, size_t n_rows, size_t n_out, float* y, size_t ld_y) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const size_t r = row0 + 16 * mi + g + 8 * (c >> 1);
        const size_t n = out0 + 8 * ni + 2 * t + (c & 1);
        if (r < n_rows && n < n_out) y[r * ld_y + n] = acc[(mi * 2 + ni) * 4 + c];
      }
    }
  }
}

// 1.5 * 2^23: floats in [2^23, 2^24) are spaced 1 apart, so adding an int in
// (-2^22, 2^22) to these bits gives the float 1.5 * 2^23 + int exactly.
constexpr int kMagicBits = 0x4B400000;
constexpr float kMagic = 12582912.0f;

// A packed word (4 bytes of nibble pairs) as the two MMA operand words of
// 16 times a nibble per byte: the low nibbles moved up, the high ones masked
// in place (see ops_gemm_mma_packed.cu). Q4_0 keeps each nibble q as q ^ 8
// (q4_0_packed_word of the GGUF block's word), so its bytes are the signed
// 16 (q - 8); Q4_K's plain nibbles give the unsigned 16 q (mma_s8u8).
__device__ __forceinline__ unsigned q4_0_packed_word(unsigned block_word) { return block_word ^ 0x88888888u; }
__device__ __forceinline__ int packed_low_bytes(unsigned w) { return static_cast<int>((w << 4) & 0xf0f0f0f0u); }
__device__ __forceinline__ int packed_high_bytes(unsigned w) { return static_cast<int>(w & 0xf0f0f0f0u); }

// Q4_0's term, TypeQ4_0::add_scaled, from an MMA over those bytes started at
// kMagicBits: its bits as a float are kMagic + 16 S exactly (S the block
// sum). With c = wd / 16 (what the packed copy keeps) and c_magic = -kMagic c,
// both exact (wd is a widened fp16, 11 significant bits; kMagic = 3 * 2^22),
// fmaf(bits, c, c_magic) is the exact S wd rounded once: add_scaled's
// __fmul_rn(S, wd), bitwise, except that an exact zero comes out +0.0f where
// the product may give -0.0f, and both add alike to the accumulator (never
// -0.0f: it starts at +0.0f and fmaf's exact zeros are +0.0f). So a term is
// two instructions, not the three of converting S first.
struct Q4_0Scale {
  float c, c_magic;
};
// The scale the packed copy keeps beside its nibbles, whose bytes are 16
// times a nibble: the block's scale / 16 (exact for Q4_0's widened fp16 wd,
// q4_0_scale's c, and for Q4_K's d sc, q4_k_scale's c).
__device__ __forceinline__ float packed_scale(float scale) { return __fmul_rn(scale, 0.0625f); }
__device__ __forceinline__ Q4_0Scale q4_0_scale(float wd_over_16) {
  return {wd_over_16, __fmul_rn(wd_over_16, -kMagic)};
}
__device__ __forceinline__ float q4_0_magic_term(float acc, int bits, Q4_0Scale w, float ad) {
  return __fmaf_rn(__fmaf_rn(__int_as_float(bits), w.c, w.c_magic), ad, acc);
}

// Q4_K's term, TypeQ4_K::add_scaled, from an MMA started at kMagicBits
// whose bits as a float are kMagic + m isum (m = 1 on the plain nibbles, 16
// on the packed copy's nibbles in the bytes' high halves). With c = d sc / m
// and c_magic = -kMagic c, both exact (d sc has at most 17 significant bits),
// fmaf(bits, c, c_magic) is the exact d sc isum rounded once, as
// add_scaled's product (an exact zero may come out +0.0f where the product
// gives -0.0f; both leave the accumulator, never -0.0f, as it is). Then the
// min (neg_min = -d_min mn, exact) times the unit's activation sum, fused,
// and the activation scale fused into the add: three fmas a term.
struct Q4_KScale {
  float c, c_magic, neg_min;
};
__device__ __forceinline__ Q4_KScale q4_k_scale(float c, float d_min_mn) {
  return {c, __fmul_rn(c, -kMagic), -d_min_mn};
}
__device__ __forceinline__ float q4_k_magic_term(float acc, int bits, Q4_KScale w, float bsum, float ad) {
  return __fmaf_rn(ad, __fmaf_rn(w.neg_min, bsum, __fmaf_rn(__int_as_float(bits), w.c, w.c_magic)), acc);
}

// A unit row (32 int8) is two 16-byte halves; row r keeps half h at
// position h ^ ((r / 4) % 2), so the 8 rows one ldmatrix phase reads hit
// all 32 banks once.
__device__ __forceinline__ int swizzled_half(int row, int half) { return half ^ ((row >> 2) & 1); }

// The 4-byte words of global memory that cover one weight block (blocks of
// 18, 22 and 34 bytes sit at 2-byte alignment): kWords of them, kept in
// shared memory at an odd word stride so that lanes on consecutive rows
// decode without bank conflicts.
template <typename T>
struct RawBlock {
  static constexpr int kWords = T::kBlockBytes % 4 == 0 ? T::kBlockBytes / 4 : (T::kBlockBytes + 2 + 3) / 4;
  static constexpr int kStride = kWords | 1;
};
// Q4_K's unit (sub-block t of a 144-byte super-block): words 0..3 hold d,
// dmin and the 12 scale bytes, words 4..11 the sub-block's 32 quant bytes
// (the 32 bytes at 16 + 32 (t / 2), low nibbles for even t, high for odd).
template <>
struct RawBlock<TypeQ4_K> {
  static constexpr int kWords = 12;
  static constexpr int kStride = 13;
  __device__ __forceinline__ static unsigned word_offset(int word, int t) {
    return word < 4 ? 4u * word : 16u + 32u * static_cast<unsigned>(t / 2) + 4u * (word - 4);
  }
};

// p itself, as a value the compiler cannot recompute: per-lane pointers set
// up once stay in registers instead of being rebuilt from the kernel
// parameters at every use (which a kernel at its register limit otherwise
// does, at several 64-bit multiply-adds each time).
template <typename P>
__device__ __forceinline__ P* opaque(P* p) {
  asm volatile("" : "+l"(p));
  return p;
}
__device__ __forceinline__ unsigned opaque(unsigned v) {
  asm volatile("" : "+r"(v));
  return v;
}
__device__ __forceinline__ int bitrev5(int i) { return static_cast<int>(__brev(static_cast<unsigned>(i)) >> 27); }

__host__ __device__ constexpr int trailing_ones(int i) { return (i & 1) ? 1 + trailing_ones(i >> 1) : 0; }

// Four (two) 8x8 b16 matrices from shared memory: lane L gives the address
// of row L % 8 of matrix L / 8; register i of lane (g = L / 4, t = L % 4)
// receives 32-bit word t of row g of matrix i (4 consecutive int8 of that
// row). .x2 reads the addresses of lanes 0..15 only.
__device__ __forceinline__ void ldmatrix_x4(int (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x2(int (&r)[2], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem)));
}

// D = A (16x32 s8, row) * B (32x8 s8, col) + c in every accumulator.
__device__ __forceinline__ void mma_s8(int (&d)[4], const int (&a)[4], int b0, int b1, int c) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c), "r"(c), "r"(c), "r"(c));
}

// The same with B's bytes unsigned (A 16x32 s8, B 32x8 u8).
__device__ __forceinline__ void mma_s8u8(int (&d)[4], const int (&a)[4], int b0, int b1, int c) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c), "r"(c), "r"(c), "r"(c));
}

// An empty tree: no class partial (acc) and no pending subtree (stack).
template <int N>
__device__ __forceinline__ void clear_tree(float (&acc)[N], float (&stack)[5][N]) {
#pragma unroll
  for (int o = 0; o < N; ++o) {
    acc[o] = 0.0f;
#pragma unroll
    for (int lv = 0; lv < 5; ++lv) stack[lv][o] = 0.0f;
  }
}

// Pushes the class partials acc (N outputs) as a leaf with `kLevel`
// trailing ones in its index onto the balanced tree: merges with the pending
// subtrees below kLevel, left sibling first, and leaves acc = 0 for the next
// class (or, at the last leaf, kLevel == 5, the tree's total). The stack
// here is 5 levels of registers.
template <int kLevel, int N>
__device__ __forceinline__ void push_leaf(float (&acc)[N], float (&stack)[5][N]) {
#pragma unroll
  for (int o = 0; o < N; ++o) {
    float v = acc[o];
#pragma unroll
    for (int lv = 0; lv < kLevel; ++lv) v = stack[lv][o] + v;
    if constexpr (kLevel < 5) {
      stack[kLevel][o] = v;
      acc[o] = 0.0f;
    } else {
      acc[o] = v;
    }
  }
}

// push_leaf for a level known only at run time (the same for the whole block).
template <typename Stack, int N>
__device__ __forceinline__ void push_leaf_at(int level, float (&acc)[N], Stack& stack) {
  switch (level) {
    case 0: push_leaf<0>(acc, stack); break;
    case 1: push_leaf<1>(acc, stack); break;
    case 2: push_leaf<2>(acc, stack); break;
    case 3: push_leaf<3>(acc, stack); break;
    case 4: push_leaf<4>(acc, stack); break;
    default: push_leaf<5>(acc, stack); break;
  }
}

// The walk over (class, step) pairs. A class (lane l = bitrev5(class)) has
// P steps, units l + 32 j for j < P, with P = J = ceil(n_units / 32) rounded
// up to kP (1, 2 or 4) or to a multiple of 8 (kP == 8); steps with
// u >= n_units add +0.0f. kP < 8: a stage holds 8 / kP whole classes;
// kP == 8: a class spans `stages_per_class` whole stages. So every class
// ends at a slot known at compile time, and all but the stage's last class
// have their tree level known at compile time too.
template <int kP>
struct Walk {
  static constexpr int kClassesPerStage = kP < 8 ? kStageUnits / kP : 1;
  int stages_per_class;  // kP == 8 only
  __host__ __device__ __forceinline__ int n_stages() const {
    return kP < 8 ? 32 / kClassesPerStage : 32 * stages_per_class;
  }
  __device__ __forceinline__ int unit(int stage, int slot) const {
    if constexpr (kP < 8) {
      return bitrev5(stage * kClassesPerStage + slot / kP) + 32 * (slot % kP);
    } else {
      return bitrev5(stage / stages_per_class) + 32 * ((stage % stages_per_class) * kStageUnits + slot);
    }
  }
  // Whether stage s ends a class, and that class.
  __device__ __forceinline__ bool ends_class(int s) const {
    return kP < 8 || s % stages_per_class == stages_per_class - 1;
  }
  __device__ __forceinline__ int last_class(int s) const {
    return kP < 8 ? (s + 1) * kClassesPerStage - 1 : s / stages_per_class;
  }
};

// Calls f.template operator()<kP>(stages_per_class) with the walk of rows of
// k elements: J = ceil(k / 32 / 32) steps per class, 1, 2 and 3..4 walked as
// 1, 2 and 4 steps, more as a multiple of 8 (whole stages per class).
template <typename F>
void with_walk(size_t k, F&& f) {
  const size_t per_class = (k / 32 + 31) / 32;
  if (per_class <= 1) {
    f.template operator()<1>(1);
  } else if (per_class <= 2) {
    f.template operator()<2>(1);
  } else if (per_class <= 4) {
    f.template operator()<4>(1);
  } else {
    f.template operator()<8>(static_cast<int>((per_class + 7) / 8));
  }
}

// Calls f.template operator()<T>() for the weight types with a GEMM; false
// for the others.
template <typename F>
bool with_gemm_type(DType type, F&& f) {
  switch (type) {
    case DType::Q4_0: f.template operator()<TypeQ4_0>(); return true;
    case DType::Q4_1: f.template operator()<TypeQ4_1>(); return true;
    case DType::Q5_0: f.template operator()<TypeQ5_0>(); return true;
    case DType::Q5_1: f.template operator()<TypeQ5_1>(); return true;
    case DType::Q8_0: f.template operator()<TypeQ8_0>(); return true;
    case DType::Q4_K: f.template operator()<TypeQ4_K>(); return true;
    default: return false;
  }
}

// The first version (ops_gemm_mma_v1.cu), launched as gemm_mma launches
// the current ones (arguments checked there).
void launch_gemm_v1(DType type, const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y,
                    size_t ld_y, cudaStream_t stream);

// The packed version (ops_gemm_mma_packed.cu, Q4_0 and Q4_K): the sizes of
// its packed operands, the weights' packing, and the launch for 1..3
// targets of `type` that read x (the activations' packing into
// x.gemm_pack, once, then one GEMM launch over every target's w_packed).
size_t packed_weight_bytes(DType type, size_t n_out, size_t k);
size_t packed_activation_bytes(DType type, size_t n_rows, size_t k);
void pack_weights(DType type, const void* w, size_t n_out, size_t k, void* dst, cudaStream_t stream);
void launch_gemm_packed(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                        cudaStream_t stream);
// Whether this device's blocks may take the packed kernel's shared memory
// for `type`: its 64 x 64 block (Q4_0 112 KiB, Q4_K 128 KiB: not on
// compute capability 8.6 and 8.9), or the 64 x 128 one (wide; Q4_0 only,
// 210 KiB: compute capability 9.0 only).
bool packed_block_fits(DType type, bool wide);

}  // namespace muser::cuda::gemm
