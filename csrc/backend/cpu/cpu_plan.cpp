#include "backend/cpu/cpu_plan.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace muser::cpu {
namespace {

size_t align_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

bool row_local(OpKind kind) {
  return kind != OpKind::MatMul && kind != OpKind::Attention;
}

// Ops whose every output element depends only on the same element of its
// inputs (and the elementwise functions give an element the same bits
// wherever it sits: ops_activation.h), so a row may be cut into columns.
bool column_local(OpKind kind) {
  return kind == OpKind::Add || kind == OpKind::Scale || kind == OpKind::Glu || kind == OpKind::Softcap;
}

// Rows an op processes.
size_t op_rows(const Op& op, const StepGraph& g) {
  return op.kind == OpKind::KvStore ? g.tensor(op.src[0]).rows : g.tensor(op.dst).rows;
}

// Tensors an op writes (KvStore writes the KV, no tensor).
bool writes(const Op& op, TensorId t) { return op.dst != kNoTensor && op.dst == t; }

class PlanBuilder {
 public:
  PlanBuilder(const StepGraph& g, const WeightViews& w, const KernelSet& k, size_t threads)
      : g_(g), w_(w), k_(k), threads_(threads) {}

  Plan build() {
    plan_.graph_id = g_.id;
    place_tensors();
    plan_.op_rope.assign(g_.ops.size(), 0);
    add_rope_tables();
    size_t i = 0;
    while (i < g_.ops.size()) {
      const Op& op = g_.ops[i];
      if (op.kind == OpKind::MatMul) {
        i = add_matmuls(i);
      } else if (op.kind == OpKind::Attention) {
        add_attention(i);
        ++i;
      } else {
        i = add_chain(i);
      }
    }
    for (Stage& s : plan_.stages) {
      if (s.kind == StageKind::Chain) split_chain_columns(s);
    }
    return std::move(plan_);
  }

 private:
  void place_tensors() {
    plan_.tensor_offset.assign(g_.tensors.size(), 0);
    size_t at = 0;
    for (size_t t = 0; t < g_.tensors.size(); ++t) {
      const TensorDesc& d = g_.tensors[t];
      if (d.kind != TensorKind::Activation) continue;
      plan_.tensor_offset[t] = at;
      at += align_up(d.rows * d.cols, 16);  // 64-byte aligned rows blocks
    }
    plan_.arena_floats = at;
  }

  // One table per distinct RoPE setting; the stage that fills them comes first.
  void add_rope_tables() {
    struct Key {
      double base, scale;
      size_t n_rot;
      TensorId divisors;
    };
    std::vector<Key> keys;
    for (size_t i = 0; i < g_.ops.size(); ++i) {
      const Op& op = g_.ops[i];
      if (op.kind != OpKind::Rope) continue;
      const Key key{op.p.rope_base, op.p.rope_freq_scale, op.p.n_rot, op.src[2]};
      size_t k = 0;
      while (k < keys.size() && !(keys[k].base == key.base && keys[k].scale == key.scale &&
                                  keys[k].n_rot == key.n_rot && keys[k].divisors == key.divisors)) {
        ++k;
      }
      if (k == keys.size()) {
        keys.push_back(key);
        const std::vector<float> none;
        const std::vector<float>& divisors =
            key.divisors == kNoTensor ? none : w_.vectors[g_.tensor(key.divisors).weight];
        RopeTable table{RopeFrequencies(key.base, key.scale, key.n_rot, divisors), plan_.arena_floats};
        plan_.arena_floats += 2 * align_up(g_.shape.n_rows * (key.n_rot / 2), 16);
        plan_.ropes.push_back(std::move(table));
      }
      plan_.op_rope[i] = k;
    }
    if (!plan_.ropes.empty()) {
      Stage s;
      s.kind = StageKind::RopeAngles;
      s.rows = g_.shape.n_rows;
      s.rows_per_task = chain_rows_per_task(s.rows);
      s.n_tasks = chain_tasks(s.rows);
      plan_.stages.push_back(std::move(s));
    }
  }

  static size_t chain_rows_per_task(size_t rows) { return rows <= kRowsPerTask ? 1 : kRowsPerTask; }
  static size_t chain_tasks(size_t rows) {
    return rows == 0 ? 0 : (rows + chain_rows_per_task(rows) - 1) / chain_rows_per_task(rows);
  }

  size_t add_chain(size_t i) {
    Stage s;
    s.kind = StageKind::Chain;
    s.rows = op_rows(g_.ops[i], g_);
    std::vector<TensorId> gathered;  // tables of GetRows ops in the chain (read across rows)
    std::vector<TensorId> written;
    for (; i < g_.ops.size(); ++i) {
      const Op& op = g_.ops[i];
      if (!row_local(op.kind) || op_rows(op, g_) != s.rows) break;
      // A chain runs its rows in independent chunks, so an op may join only
      // if no chunk can read a row another chunk writes: a GetRows reading an
      // activation written in this chain, or an op writing a gathered table,
      // starts a new chain.
      bool conflict = false;
      if (op.kind == OpKind::GetRows && g_.tensor(op.src[0]).kind == TensorKind::Activation) {
        conflict = std::find(written.begin(), written.end(), op.src[0]) != written.end();
      }
      for (TensorId t : gathered) conflict = conflict || writes(op, t);
      if (conflict && !s.ops.empty()) break;
      if (op.kind == OpKind::GetRows && g_.tensor(op.src[0]).kind == TensorKind::Activation) {
        gathered.push_back(op.src[0]);
      }
      if (op.dst != kNoTensor) written.push_back(op.dst);
      s.ops.push_back(i);
    }
    s.rows_per_task = chain_rows_per_task(s.rows);
    s.n_tasks = chain_tasks(s.rows);
    plan_.stages.push_back(std::move(s));
    return i;
  }

  // A chain of a few rows (decode) whose ops are all column-local over one
  // width, with its quantized inputs of that width, is cut into column
  // pieces so that up to `threads` tasks share it: a decode row's SwiGLU
  // and quantization ran on one thread while the others waited (1536
  // columns took ~1.5 us on one core of the 2-core EPYC, so llama-1b's 8192
  // take ~8); smollm2's 1536 columns stay whole (kChainMinPieceCols). Every element and every activation block is
  // computed as in one piece (MatmulJob::quantize_cols).
  void split_chain_columns(Stage& s) {
    if (threads_ <= 1 || s.rows == 0 || s.rows > kRowsPerTask) return;
    size_t cols = 0;
    for (size_t i : s.ops) {
      const Op& op = g_.ops[i];
      if (!column_local(op.kind) || op.dst == kNoTensor) return;
      const size_t width = g_.tensor(op.dst).cols;
      if (cols != 0 && width != cols) return;
      cols = width;
      for (TensorId src : op.src) {
        if (src == kNoTensor) continue;
        const TensorDesc& t = g_.tensor(src);
        // Add's second operand may be a weight vector of the row's width.
        if (t.kind == TensorKind::Weight ? w_.vectors[t.weight].size() != cols : t.cols != cols) return;
      }
    }
    for (const QuantizeEntry& q : s.quantize) {
      if (g_.tensor(q.x).cols != cols || kChainPieceCols % q.job.quantize_cols_granule() != 0) return;
    }
    const size_t row_tasks = s.n_tasks;
    size_t pieces = std::min(cols / kChainMinPieceCols, std::max<size_t>(1, threads_ / row_tasks));
    if (pieces <= 1) return;
    const size_t piece_cols = ((cols + pieces - 1) / pieces + kChainPieceCols - 1) / kChainPieceCols * kChainPieceCols;
    pieces = (cols + piece_cols - 1) / piece_cols;
    if (pieces <= 1) return;
    s.col_pieces = pieces;
    s.piece_cols = piece_cols;
    s.n_tasks = row_tasks * pieces;
  }

  size_t add_matmuls(size_t i) {
    Stage quantize;
    quantize.kind = StageKind::Quantize;
    Stage tiles;
    tiles.kind = StageKind::Tiles;
    std::vector<TensorId> outputs;
    std::vector<TensorId> inputs;
    size_t act_at = 0;
    for (; i < g_.ops.size() && g_.ops[i].kind == OpKind::MatMul; ++i) {
      const Op& op = g_.ops[i];
      // Independent of the matmuls already in the group: reads none of their
      // outputs, writes none of their inputs or outputs.
      const bool depends = std::find(outputs.begin(), outputs.end(), op.src[1]) != outputs.end() ||
                           std::find(outputs.begin(), outputs.end(), op.dst) != outputs.end() ||
                           std::find(inputs.begin(), inputs.end(), op.dst) != inputs.end();
      if (depends) break;
      outputs.push_back(op.dst);
      inputs.push_back(op.src[1]);
      const TensorDesc& x = g_.tensor(op.src[1]);
      TileEntry tile;
      tile.op = i;
      const TensorInfo& matrix = w_.matrices[g_.tensor(op.src[0]).weight];
      tile.job = MatmulJob::plan(matrix, k_, threads_, w_.packed.find(matrix), x.rows);
      if (x.rows == 0) tile.job.n_chunks = 0;
      // Matmuls reading the same input in the same activation format share
      // its quantized rows (the same bytes either way).
      size_t q = 0;
      while (q < quantize.quantize.size() &&
             !(quantize.quantize[q].x == op.src[1] && quantize.quantize[q].job.format == tile.job.format)) {
        ++q;
      }
      if (q == quantize.quantize.size()) {
        QuantizeEntry entry{op.src[1], x.rows, act_at, tile.job};
        act_at += align_up(tile.job.act_row_bytes * x.rows, 64);
        quantize.quantize.push_back(entry);
      }
      tile.act_offset = quantize.quantize[q].act_offset;
      tile.rows = x.rows;
      tile.first_task = tiles.n_tasks;
      tiles.n_tasks += tile.job.n_chunks;
      tiles.tiles.push_back(tile);
    }
    if (tiles.tiles.size() > 1) {
      // Several matmuls share the stage: plan their decode chunks for that.
      tiles.n_tasks = 0;
      for (TileEntry& tile : tiles.tiles) {
        const Op& op = g_.ops[tile.op];
        const TensorInfo& matrix = w_.matrices[g_.tensor(op.src[0]).weight];
        tile.job = MatmulJob::plan(matrix, k_, threads_, w_.packed.find(matrix), tile.rows, true);
        if (tile.rows == 0) tile.job.n_chunks = 0;
        tile.first_task = tiles.n_tasks;
        tiles.n_tasks += tile.job.n_chunks;
      }
    }
    plan_.act_bytes = std::max(plan_.act_bytes, act_at);
    // Row chunks of a chain over the same rows can quantize as they finish
    // (quantizing reads only the row itself). The activation bytes are free
    // by then: the previous matmuls' tiles completed before the chain began.
    Stage* chain = plan_.stages.empty() ? nullptr : &plan_.stages.back();
    bool fold = chain != nullptr && chain->kind == StageKind::Chain && chain->quantize.empty();
    for (const QuantizeEntry& q : quantize.quantize) fold = fold && q.rows == chain->rows;
    // Likewise the attention right before the matmuls that read its output
    // (the output projection): each task quantizes the (row, head) pieces it
    // wrote, when a head's values are whole activation blocks (a Q8_0 /
    // Q8_1 block is 32 elements, quantized on its own). One stage and
    // barrier fewer per layer; the same bytes.
    Stage* attention = chain;
    bool fold_attention = attention != nullptr && attention->kind == StageKind::Attention &&
                          attention->quantize.empty();
    if (fold_attention) {
      const Op& op = g_.ops[attention->ops[0]];
      for (const QuantizeEntry& q : quantize.quantize) {
        fold_attention = fold_attention && q.x == op.dst && op.p.head_dim_v % q.job.quantize_cols_granule() == 0;
      }
    }
    if (fold || fold_attention) {
      chain->quantize = std::move(quantize.quantize);
    } else {
      for (const QuantizeEntry& q : quantize.quantize) quantize.n_tasks += quantize_tasks(q.rows);
      plan_.stages.push_back(std::move(quantize));
    }
    plan_.stages.push_back(std::move(tiles));
    return i;
  }

  void add_attention(size_t i) {
    const Op& op = g_.ops[i];
    const size_t group = op.p.n_head / op.p.n_head_kv;
    if (group > kMaxGroupHeads) {
      throw ModelFormatError("[cpu backend] " + std::to_string(group) +
                             " query heads per KV head: expected at most " + std::to_string(kMaxGroupHeads));
    }
    plan_.max_group_heads = std::max(plan_.max_group_heads, group);
    Stage s;
    s.kind = StageKind::Attention;
    s.ops.push_back(i);
    plan_.stages.push_back(std::move(s));
  }

 public:
  static size_t quantize_tasks(size_t rows) {
    return rows == 0 ? 0 : (rows + kQuantizeRowsPerTask - 1) / kQuantizeRowsPerTask;
  }

 private:
  const StepGraph& g_;
  const WeightViews& w_;
  const KernelSet& k_;
  size_t threads_;
  Plan plan_;
};

}  // namespace

size_t quantize_tasks(size_t rows) { return PlanBuilder::quantize_tasks(rows); }

Plan build_plan(const StepGraph& graph, const WeightViews& weights, const KernelSet& kernels, size_t threads) {
  return PlanBuilder(graph, weights, kernels, threads).build();
}

}  // namespace muser::cpu
