// Byte layouts of ggml's quantized blocks, as GGUF stores them on disk, plus
// the int8 activation blocks the dot-product kernels pair them with.
//
// Defined once here and included by the C++ kernels, CUDA and Metal Shading
// Language, so this header sticks to C-like constructs: plain structs of
// fixed-width fields, no STL, no constructors. Half-precision values are kept
// as their raw 16-bit patterns (uint16_t) so every language reads the same
// bytes; each backend converts them with its own fp16 helper.
//
// All multi-byte fields are little-endian. Every block is byte-packed in the
// file (no padding): the static_asserts below pin each size, so a compiler
// that inserted padding would fail to build rather than misread a model.
#ifndef MUSER_TENSOR_QUANT_BLOCKS_H
#define MUSER_TENSOR_QUANT_BLOCKS_H

#if defined(__METAL_VERSION__)
// MSL provides the fixed-width integer types in metal_stdlib.
#include <metal_stdlib>
#elif defined(__cplusplus)
#include <cstdint>
#else
#include <stdint.h>
#endif

#if defined(__cplusplus) && !defined(__METAL_VERSION__)
namespace muser {
#endif

// Elements per block of the "legacy" formats and of the super-blocks of the
// K-quants.
#define MUSER_QK32 32
#define MUSER_QK_K 256
// K-quant scale tables: 12 bytes hold eight 6-bit (scale, min) pairs.
#define MUSER_K_SCALE_BYTES 12

// ---- 32-element formats. qs packs element j in the low nibble of qs[j] and
// element j + 16 in the high nibble (j < 16).

// x = d * (q - 8), q in 0..15.
typedef struct {
  uint16_t d;        // fp16 scale
  uint8_t qs[16];    // 4-bit quants
} BlockQ4_0;

// x = d * q + m, q in 0..15.
typedef struct {
  uint16_t d;        // fp16 scale
  uint16_t m;        // fp16 minimum
  uint8_t qs[16];
} BlockQ4_1;

// x = d * (q - 16), q in 0..31. Bit j of the little-endian uint32 in qh is
// the fifth bit of element j.
typedef struct {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
} BlockQ5_0;

// x = d * q + m, q in 0..31; qh as in BlockQ5_0.
typedef struct {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
} BlockQ5_1;

// x = d * q, q in -128..127 (quantizers produce -127..127).
typedef struct {
  uint16_t d;
  int8_t qs[32];
} BlockQ8_0;

// Activation block for Q4_1 / Q5_1 weights: x = d * q, with s = d * sum(q)
// so the weight's minimum m contributes m * s without touching the quants.
typedef struct {
  uint16_t d;
  uint16_t s;        // fp16 of d * sum(qs)
  int8_t qs[32];
} BlockQ8_1;

// ---- 256-element K-quant super-blocks.

// 16 sub-blocks of 16. scales[i]: low nibble = scale, high nibble = min of
// sub-block i; x = d * sc * q - dmin * mn, q in 0..3. qs[32*h + l] holds
// element 128*h + 32*k + l in bits 2k..2k+1 (k < 4, l < 32).
typedef struct {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
} BlockQ2_K;

// 16 sub-blocks of 16. Low two bits as in Q2_K; bit k of hmask[l] (element
// 32*k + l) clear means subtract 4, so q in -4..3. scales packs sixteen 6-bit
// scales (stored + 32): x = d * (sc - 32) * q.
typedef struct {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
} BlockQ3_K;

// 8 sub-blocks of 32 with 6-bit (scale, min) pairs packed in scales;
// x = d * sc * q - dmin * mn, q in 0..15. qs[32*p + l]: low nibble is element
// 64*p + l, high nibble element 64*p + 32 + l.
typedef struct {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
} BlockQ4_K;

// Q4_K plus a fifth bit: bit 2p of qh[l] for element 64*p + l, bit 2p+1 for
// element 64*p + 32 + l; q in 0..31.
typedef struct {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
} BlockQ5_K;

// 16 sub-blocks of 16 with signed 8-bit scales; x = d * sc * (q - 32),
// q in 0..63: low 4 bits in ql, high 2 bits in qh (see reference_kernels.cpp).
typedef struct {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
} BlockQ6_K;

// Activation block for the K-quants: x = d * q with an fp32 scale, plus the
// sums of each group of 16 quants (the K-quant minimums need them).
typedef struct {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
} BlockQ8_K;

#if defined(__cplusplus) || defined(__METAL_VERSION__)
#define MUSER_BLOCK_SIZE_IS(type, bytes) static_assert(sizeof(type) == (bytes), #type " size")
#else
#define MUSER_BLOCK_SIZE_IS(type, bytes) _Static_assert(sizeof(type) == (bytes), #type " size")
#endif
MUSER_BLOCK_SIZE_IS(BlockQ4_0, 18);
MUSER_BLOCK_SIZE_IS(BlockQ4_1, 20);
MUSER_BLOCK_SIZE_IS(BlockQ5_0, 22);
MUSER_BLOCK_SIZE_IS(BlockQ5_1, 24);
MUSER_BLOCK_SIZE_IS(BlockQ8_0, 34);
MUSER_BLOCK_SIZE_IS(BlockQ8_1, 36);
MUSER_BLOCK_SIZE_IS(BlockQ2_K, 84);
MUSER_BLOCK_SIZE_IS(BlockQ3_K, 110);
MUSER_BLOCK_SIZE_IS(BlockQ4_K, 144);
MUSER_BLOCK_SIZE_IS(BlockQ5_K, 176);
MUSER_BLOCK_SIZE_IS(BlockQ6_K, 210);
MUSER_BLOCK_SIZE_IS(BlockQ8_K, 292);
#undef MUSER_BLOCK_SIZE_IS

#if defined(__cplusplus) && !defined(__METAL_VERSION__)
}  // namespace muser
#endif

#endif  // MUSER_TENSOR_QUANT_BLOCKS_H
