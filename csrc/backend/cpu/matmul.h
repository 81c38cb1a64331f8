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
using ActivationFormatId = uint32_t;
}

namespace muser::cpu {

// x: (n_rows, w.ne[0]) float32 row-major; y: (n_rows, w.ne[1]) float32.
// Throws InvalidArgument when w is not 2-D.
void matmul(const TensorInfo& w, const float* x, size_t n_rows, float* y, ThreadPool& pool);

// Dequantizes rows `row_ids[k]` of a 2-D tensor into out[k, :] (w.ne[0] floats
// each): the embedding lookup. Throws InvalidArgument for an id out of range.
void dequantize_rows(const TensorInfo& w, const int32_t* row_ids, size_t n, float* out);

// One matmul cut into the two phases a graph executor runs as separate
// stages, each split among threads in any way: quantizing the activation
// rows (each row on its own), then tiles of output rows (each element
// computed from one weight row and one activation row). Results are the
// bits matmul() produces, whatever the split.
struct MatmulJob {
  TileFn tile = nullptr;
  QuantizeFn quantize = nullptr;
  // Activation format of the weight type, plus kPackedActFlag when the rows
  // also carry the packed tile's PackedActExtra (kernel_set.h): jobs share
  // quantized rows only when these are equal.
  ActivationFormatId format = 0;
  static constexpr ActivationFormatId kPackedActFlag = 0x100;
  size_t n_in = 0, n_out = 0;
  const uint8_t* w = nullptr;
  size_t w_row_bytes = 0;
  size_t act_row_bytes = 0;   // the stride of quantized rows (blocks, then any extras)
  size_t act_extra_at = 0;    // where a row's PackedActExtra entries start; 0: none
  size_t chunk = 0;     // output rows per tile task
  size_t n_chunks = 0;  // tile tasks: out_chunks output chunks x row_blocks activation-row blocks
  size_t out_chunks = 0;
  // Activation rows per task (the last block takes every row after the
  // others); 0: each task covers all rows. Set only for calls of many rows
  // (prefill), where a task over all rows would re-read every activation
  // row for a sliver of the outputs.
  size_t row_block = 0;
  // Decode-sized calls whose chunks hold several runs of groups: tasks from
  // tail_first on cover tail_chunk outputs each (one run) after the
  // tail_first chunks of `chunk`, so a stage ends on short tasks; 0: every
  // task is `chunk` outputs.
  size_t tail_first = 0;
  size_t tail_chunk = 0;
  // Set when the weight is read from its pack (packed_weights.h): group g of
  // kPackedRows rows at packed + g * packed_group_bytes.
  PackedTileFn packed_tile = nullptr;
  const uint8_t* packed = nullptr;
  size_t packed_group_bytes = 0;

  // Validates w (InvalidArgument as matmul does) and sizes the tiles for
  // `threads` threads and calls of `n_rows` activation rows (0: unknown; a
  // job runs correctly on any n_rows, the split is only sized for this
  // one). With `pack` (w's pack, made with `kernels`; otherwise ignored) the
  // tiles read the pack. `shares_stage`: the job's tasks run in one stage
  // with other matmuls' (q, k and v; gate and up), so its decode chunks are
  // not narrowed for balance on its own (matmul.cpp, fit_decode_chunks).
  static MatmulJob plan(const TensorInfo& w, const KernelSet& kernels, size_t threads,
                        const PackedWeight* pack = nullptr, size_t n_rows = 0, bool shares_stage = false);
  // act row r = quantized x row r, for r in [first, last).
  void quantize_rows(const float* x, size_t first, size_t last, uint8_t* act) const;
  // Elements a column range given to quantize_cols must start and end on
  // (the activation format's block).
  size_t quantize_cols_granule() const;
  // Columns [first, first + n) of one row x (the whole row, n_in floats)
  // into the same columns' bytes of its quantized row act_row: exactly the
  // bytes quantize_rows writes there, as each block is quantized on its own
  // (QuantizeFn). first and n are multiples of quantize_cols_granule().
  void quantize_cols(const float* x, size_t first, size_t n, uint8_t* act_row) const;
  // Task c < n_chunks: y[row block, output chunk] of the n_rows rows of act.
  void run_chunk(size_t c, const uint8_t* act, size_t n_rows, float* y) const;
  // The weight bytes task c reads (its output chunk's rows or groups), for
  // a prefetch ahead of it.
  void chunk_weights(size_t c, const uint8_t** begin, size_t* bytes) const;

 private:
  // Output rows [*first, *first + *rows) of output chunk c < out_chunks.
  void chunk_outputs(size_t c, size_t* first, size_t* rows) const;
};

// matmul with an explicit kernel table instead of the best one for this CPU
// (tests compare instruction sets; benchmarks time them). Same contract.
void matmul(const TensorInfo& w, const float* x, size_t n_rows, float* y, ThreadPool& pool,
            const KernelSet& kernels);

// matmul on a packed copy of a weight, with the table that packed it. The
// results are the kernels' for that table and layout (for the packed VNNI
// layouts: bitwise ref::vec_dot); same contract.
void matmul(const PackedWeight& w, const float* x, size_t n_rows, float* y, ThreadPool& pool);

// Runs a planned job on `pool`, whatever thread count and n_rows the job's
// split was sized for (tests check that no split moves a bit; benchmarks
// time a big machine's split on a small one). Same contract.
void run_matmul(const MatmulJob& job, const float* x, size_t n_rows, float* y, ThreadPool& pool);

}  // namespace muser::cpu
