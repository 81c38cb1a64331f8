// Scalar reference kernels: the oracle every SIMD, CUDA and Metal kernel is
// tested against, and the CPU fallback on machines without a SIMD kernel set.
// Written for clarity, not speed; each follows the block layouts of
// tensor/quant_blocks.h element by element.
//
// All functions are pure and thread-safe. Lengths are element counts and must
// be a multiple of the type's block size (callers validate; these functions
// throw InvalidArgument when they are not).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"

namespace muser {

// How an activation row is stored when it meets a weight type in a dot
// product. Quantized weights pair with int8 blocks as llama.cpp does (Q8_0
// for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants); float
// weights take the float32 row as it is.
enum class ActivationFormat : uint32_t { F32, Q8_0, Q8_1, Q8_K };

ActivationFormat activation_format(DType weight_type);
const char* activation_format_name(ActivationFormat format);
// Block size in elements (1 for F32) and bytes of one block.
size_t activation_block_elems(ActivationFormat format);
size_t activation_row_bytes(ActivationFormat format, size_t n);

namespace ref {

// dst[0..n) = the n elements stored at src (n a block multiple of `type`).
void dequantize_row(DType type, const void* src, float* dst, size_t n);

// Activation quantizers. Each block gets its own scale from its largest
// magnitude; values round to nearest, ties to even. Deterministic: the same
// floats always give the same bytes.
//  - Q8_0 / Q8_1: d = amax / 127 stored as fp16, q = round(x * 127 / amax);
//    Q8_1 also stores s = fp16(d * sum(q)).
//  - Q8_K: the element of largest magnitude maps to exactly -127 (so d may be
//    negative), d = 1 / scale in fp32, bsums = sums of each group of 16.
void quantize_row_q8_0(const float* x, BlockQ8_0* y, size_t n);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, size_t n);
void quantize_row_q8_K(const float* x, BlockQ8_K* y, size_t n);
// Dispatches on `format`; F32 copies the floats. dst holds
// activation_row_bytes(format, n) bytes.
void quantize_activation_row(ActivationFormat format, const float* x, void* dst, size_t n);

// Dot product of one weight row of `type` (n elements) with one activation
// row in activation_format(type). Integer sums per block, then a float
// accumulation over blocks in order.
float vec_dot(DType type, size_t n, const void* weight_row, const void* activation_row);

}  // namespace ref
}  // namespace muser
