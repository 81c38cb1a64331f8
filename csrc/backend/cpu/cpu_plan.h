// How the CPU backend runs a step graph: its ops grouped into stages that
// the executor runs in order, each stage a set of independent tasks.
//
// - Chain: consecutive per-row ops over the same rows (norms, adds, RoPE,
//   KV writes, activations...), run together over chunks of rows (one row
//   or kRowsPerTask), so a run of cheap ops costs one barrier instead of
//   one per op.
// - Quantize / Tiles: consecutive independent matmuls (Q, K and V; gate and
//   up) share one stage that quantizes each distinct input once, then one
//   stage of all their output tiles. When a chain over the same rows comes
//   just before, the chain quantizes the inputs as it finishes each row
//   chunk instead (one barrier fewer; what the old inline quantization did);
//   when the attention comes just before (the output projection), each
//   attention task quantizes the (row, head) pieces of the output it wrote.
// - Attention: blocks of up to kAttentionBlockRows rows of one sequence
//   times query heads (cut per step, since it depends on the sequences).
// - RopeAngles (first): the cos/sin tables of each distinct RoPE setting for
//   the step's positions, shared by every layer that rotates alike.
// Grouping changes no bits: every op computes each element as it would alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_kv_storage.h"
#include "backend/cpu/kernel_set.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/ops_rope.h"
#include "graph/graph.h"
#include "weights/gguf_file.h"

namespace muser::cpu {

// Rows per task of a chain of more than kRowsPerTask rows; a chain of this
// many rows or fewer (decode rows, short prefill chunks) runs one row per
// task, so a 4-row decode step's norms, activations and quantization run on
// four threads instead of one.
constexpr size_t kRowsPerTask = 8;
// Activation rows quantized per task.
constexpr size_t kQuantizeRowsPerTask = 16;
// Consecutive rows of a sequence whose attention one task computes together.
// Eight rows times a GQA group share each converted key and value row (was
// four: smollm2 prefill 512, attention 10% less work at 1 thread).
constexpr size_t kAttentionBlockRows = 8;
// Columns of a piece of a column-split chain are a multiple of this: whole
// activation blocks of every format (Q8_K's 256 elements) and whole vectors.
constexpr size_t kChainPieceCols = 256;
// And at least this many (the last piece aside): below ~1000 columns a
// SwiGLU + quantization takes ~1 us on one core, less than handing its
// pieces to other cores and their results on to the next stage.
constexpr size_t kChainMinPieceCols = 1024;
// Query heads per KV head the attention tasks are sized for.
constexpr size_t kMaxGroupHeads = 64;

// The weights as the CPU reads them: matrices in place in the mapping,
// vectors converted to float32 once.
struct WeightViews {
  std::vector<TensorInfo> matrices;         // by weight index (2-D weights)
  std::vector<std::vector<float>> vectors;  // by weight index (1-D weights; empty for matrices)
  // Interleaved copies of the matrices the best kernel table wants packed,
  // keyed by their entry in `matrices` (which must not move afterwards).
  PackedWeights packed;
};

struct AttentionBlock {
  size_t slot;
  size_t first_row;
  size_t n_rows;
};

struct QuantizeEntry {
  TensorId x;
  size_t rows;
  size_t act_offset;  // into the step's activation bytes
  MatmulJob job;  // a matmul reading this input in this format (its quantizer)
};

struct TileEntry {
  size_t op;           // graph op index
  size_t act_offset;   // its quantized input rows, in the step's activation bytes
  size_t rows;
  MatmulJob job;
  size_t first_task;   // tasks [first_task, first_task + job.n_chunks) of the stage
};

enum class StageKind { RopeAngles, Chain, Quantize, Tiles, Attention };

struct Stage {
  StageKind kind;
  size_t rows = 0;               // Chain, RopeAngles: rows processed
  size_t rows_per_task = 1;      // Chain, RopeAngles: rows of each task (the last takes the rest)
  // Chain: each row task is cut into col_pieces tasks of piece_cols columns
  // (the last takes the rest) when every op of the chain and its quantized
  // inputs are column-local over the same `cols` (cpu_plan.cpp says when).
  size_t col_pieces = 1;
  size_t piece_cols = 0;
  std::vector<size_t> ops;       // Chain: graph op indices, in order; Attention: one
  // Quantize: the inputs to quantize; Chain: inputs quantized after the ops
  // of each row chunk; Attention: its output, quantized per (row, head)
  // after each task.
  std::vector<QuantizeEntry> quantize;
  std::vector<TileEntry> tiles;
  size_t n_tasks = 0;            // fixed task count (Attention: decided per step)
};

struct RopeTable {
  RopeFrequencies freqs;
  size_t offset = 0;  // into the arena: cos (rows x n_pairs) then sin
};

struct Plan {
  uint64_t graph_id = 0;
  std::vector<Stage> stages;
  std::vector<size_t> tensor_offset;  // arena float offset per activation tensor
  std::vector<RopeTable> ropes;
  std::vector<size_t> op_rope;        // per op: index into ropes (Rope ops)
  size_t arena_floats = 0;
  size_t act_bytes = 0;
  size_t max_group_heads = 1;
};

// Tasks of a Quantize stage for one input of `rows` rows.
size_t quantize_tasks(size_t rows);

// Compiles `graph` for `threads` threads. Throws InvalidArgument for a
// weight type without a kernel, ModelFormatError for an unsupported shape.
Plan build_plan(const StepGraph& graph, const WeightViews& weights, const KernelSet& kernels, size_t threads);

}  // namespace muser::cpu
