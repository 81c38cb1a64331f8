// The CPU's weight-stationary products. Contract shared by every caller:
//
//   y[r, o] = sum_i W[o, i] * x[r, i]   for r < n_rows, o < W.ne[1]
//   (W is a GGUF tensor in ggml order: ne[0] = input size, ne[1] = outputs)
//
// - Each weight row is read once for all n_rows activation rows (one weight
//   pass, what decode_group relies on).
// - Row r of y is bitwise identical whatever n_rows is, whatever the other
//   rows hold and however many threads run: the reduction order per output
//   element is fixed (the exactness contract in DESIGN.md).
// - Quantized weights take int8-quantized activations as llama.cpp does
//   (the activation row is quantized once per call, per row).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/kernel_set.h"
#include "backend/cpu/packed_weights.h"
#include "core/thread_pool.h"
#include "weights/gguf_file.h"

namespace muser::cpu {

// x: (n_rows, w.ne[0]) float32 row-major; y: (n_rows, w.ne[1]) float32.
// Throws InvalidArgument when w is not 2-D.
void matmul(const TensorInfo& w, const float* x, size_t n_rows, float* y, ThreadPool& pool);

// Dequantizes rows `row_ids[k]` of a 2-D tensor into out[k, :] (w.ne[0] floats
// each): the embedding lookup. Throws InvalidArgument for an id out of range.
void dequantize_rows(const TensorInfo& w, const int32_t* row_ids, size_t n, float* out);

// matmul with an explicit kernel table instead of the best one for this CPU
// (tests compare instruction sets; benchmarks time them). Same contract.
void matmul(const TensorInfo& w, const float* x, size_t n_rows, float* y, ThreadPool& pool,
            const KernelSet& kernels);

// matmul on a packed copy of a weight, with the table that packed it. The
// results are the kernels' for that table and layout (for the packed VNNI
// layouts: bitwise ref::vec_dot); same contract.
void matmul(const PackedWeight& w, const float* x, size_t n_rows, float* y, ThreadPool& pool);

// matmul of w through its pack in `packs` when it has one, else with the
// best table on the GGUF blocks.
void matmul(const TensorInfo& w, const PackedWeights& packs, const float* x, size_t n_rows, float* y,
            ThreadPool& pool);

}  // namespace muser::cpu
