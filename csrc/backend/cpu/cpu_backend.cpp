#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "backend/cpu/ops_attention.h"
#include "backend/cpu/ops_norm.h"
#include "backend/registry.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "tensor/half_float.h"
#include "tensor/reference_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace muser::cpu {
namespace {

const BackendRegistration registration(
    "cpu", 10, [] { return std::string(); },
    [](const BackendContext& context) -> std::unique_ptr<Backend> {
      return std::make_unique<CpuBackend>(context.pool);
    });

// Bytes of weights a waiting thread prefetches for its next task.
constexpr size_t kPrefetchBytes = 256 * 1024;
constexpr size_t kNoStage = ~size_t{0};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A 1-D weight as float32.
std::vector<float> to_floats(const WeightDesc& w) {
  const size_t n = static_cast<size_t>(w.ne[0]);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (w.type) {
      case DType::F32: std::memcpy(&out[i], w.data + 4 * i, 4); break;
      case DType::F16: {
        uint16_t h;
        std::memcpy(&h, w.data + 2 * i, 2);
        out[i] = fp16_to_fp32(h);
        break;
      }
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, w.data + 2 * i, 2);
        out[i] = bf16_to_fp32(h);
        break;
      }
      default:
        throw ModelFormatError("[cpu backend] tensor '" + w.name + "' is not a float vector");
    }
  }
  return out;
}

// Matrices up to this size are repacked at load (see load_weights).
constexpr uint64_t kMaxPackedBytes = uint64_t{64} << 20;

// Types whose plain row kernels are bound by unpacking, not by memory, even
// on a table read once per step: 4- and 5-bit blocks, whose row kernel
// reaches ~12 GB/s per core on the 16-core Xeon against ~50 for the packed
// one. Their tables are packed whatever their size.
bool packs_at_any_size(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
      return true;
    default:
      return false;
  }
}

}  // namespace

CpuBackend::CpuBackend(std::shared_ptr<ThreadPool> pool)
    : pool_(std::move(pool)), f16_(f16_vec_ops()), activations_(activation_ops()) {
  if (!pool_) throw InternalError("[cpu backend] needs a thread pool");
  scores_.resize(static_cast<size_t>(pool_->size()));
  n_threads_ = static_cast<size_t>(pool_->size());
  home_.reset(new HomeSlot[n_threads_]);
}

CpuBackend::~CpuBackend() = default;

void CpuBackend::load_weights(const WeightTable& weights) {
  weights_.matrices.assign(weights.size(), TensorInfo{});
  weights_.vectors.assign(weights.size(), {});
  for (uint32_t i = 0; i < weights.size(); ++i) {
    const WeightDesc& w = weights[i];
    TensorInfo& t = weights_.matrices[i];
    t.name = w.name;
    t.type = w.type;
    t.n_dims = w.n_dims;
    t.ne = {w.ne[0], w.ne[1], 1, 1};
    t.n_bytes = w.n_bytes;
    t.data = w.data;
    if (w.n_dims == 1) weights_.vectors[i] = to_floats(w);
  }
  // Interleaved copies of the matrices whose best kernels want them
  // (packed_weights.h), made once here; the rest stay zero-copy views. A
  // matrix over kMaxPackedBytes (only a vocabulary table is that large) is
  // packed only when its type's plain kernel cannot keep up with memory
  // (packs_at_any_size): llama-1b's 148 MB Q4_0 table is read ~4x faster
  // per core packed. Q8_0 gains less (one row against a 128k-row table:
  // ~20 vs ~12 GB/s on the 2-core EPYC) and packing gemma3's 262k-token
  // 180 MB Q8_0 table took its load from 0.31 to 0.6-0.8 s there (budget
  // 0.5 s: half of it the kernel zeroing the new pages), so it stays. The pack replaces the file's pages (released after
  // packing), so resident memory does not grow by the table. An embedding
  // table that is only looked up (the model has a separate output matrix)
  // is never packed: no product reads it.
  std::vector<const TensorInfo*> matrices;
  for (uint32_t i = 0; i < weights.size(); ++i) {
    const TensorInfo& t = weights_.matrices[i];
    if (t.n_dims != 2 || t.data == nullptr || weights[i].lookup_only) continue;
    if (t.n_bytes <= kMaxPackedBytes || packs_at_any_size(t.type)) matrices.push_back(&t);
  }
  weights_.packed = PackedWeights(matrices, kernel_set(best_isa()), *pool_, SourcePages::ReleaseMapped);
}

std::unique_ptr<KvStorage> CpuBackend::new_kv_storage(const KvLayout& layout) const {
  return std::make_unique<CpuKvStorage>(layout);
}

const Plan& CpuBackend::plan_for(const StepGraph& graph) {
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    if ((*it)->graph_id == graph.id) {
      plans_.splice(plans_.begin(), plans_, it);
      return *plans_.front();
    }
  }
  auto plan = std::make_unique<Plan>(
      build_plan(graph, weights_, kernel_set(best_isa()), static_cast<size_t>(pool_->size())));
  plans_.push_front(std::move(plan));
  if (plans_.size() > kPlanCacheSize) plans_.pop_back();
  return *plans_.front();
}

float* CpuBackend::f32(TensorId t) const { return const_cast<float*>(arena_.data()) + plan_->tensor_offset[t]; }

const int32_t* CpuBackend::ints(TensorId t, const StepGraph& graph, const StepInputs& inputs) const {
  switch (graph.tensor(t).role) {
    case InputRole::Tokens: return inputs.tokens.data();
    case InputRole::Positions: return inputs.positions.data();
    case InputRole::OutputRows: return inputs.output_rows.data();
  }
  return nullptr;
}

void CpuBackend::prepare_step(const Plan& plan, const StepGraph& graph, const StepInputs& inputs) {
  // Everything that allocates happens here, before any task runs.
  plan_ = &plan;
  if (arena_.size() < plan.arena_floats) arena_.resize(plan.arena_floats);
  if (act_bytes_.size() < plan.act_bytes + 64) act_bytes_.resize(plan.act_bytes + 64);
  const uintptr_t base = reinterpret_cast<uintptr_t>(act_bytes_.data());
  act_base_ = act_bytes_.data() + ((64 - base % 64) % 64);

  slot_storage_.assign(inputs.slots.size(), nullptr);
  for (size_t s = 0; s < inputs.slots.size(); ++s) {
    slot_storage_[s] = dynamic_cast<CpuKvStorage*>(&inputs.slots[s]->storage());
    if (slot_storage_[s] == nullptr) throw InternalError("[cpu backend] execute: KV state of another backend");
  }
  // Attention blocks: consecutive rows of one sequence, kAttentionBlockRows at most.
  blocks_.clear();
  size_t longest_span = 1;
  const size_t n_rows = inputs.tokens.size();
  for (size_t r = 0; r < n_rows;) {
    const size_t slot = inputs.row_slot[r];
    size_t end = r;
    while (end < n_rows && inputs.row_slot[end] == slot) ++end;
    for (size_t i = r; i < end; i += kAttentionBlockRows) {
      blocks_.push_back(AttentionBlock{slot, i, std::min(kAttentionBlockRows, end - i)});
    }
    longest_span = std::max(longest_span, static_cast<size_t>(inputs.positions[end - 1]) + 1);
    r = end;
  }

  const size_t threads = static_cast<size_t>(pool_->size());
  stage_tasks_.assign(plan.stages.size(), 0);
  heads_per_task_.assign(plan.stages.size(), 1);
  size_t head_dim_k = 0, head_dim_v = 0;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const Stage& stage = plan.stages[s];
    if (stage.kind != StageKind::Attention) {
      stage_tasks_[s] = stage.n_tasks;
      continue;
    }
    const Op& op = graph.ops[stage.ops[0]];
    const size_t group = op.p.n_head / op.p.n_head_kv;
    // Query heads per task: a divisor d of the GQA group. The heads of a
    // task share each key and value row as it is read; split heads read it
    // again each. A task costs about one read of its KV head plus one pass
    // per query head (taken as equal: at long context both stream the f16
    // cache), and the stage lasts its rounds of tasks over the threads, so
    // d minimizes rounds(d) * (1 + d), the larger d on a tie (smollm2's
    // 9 heads / 3 groups, one decode row: d = 3 at 2 or 4 threads, d = 1
    // at 16; a prefill's many blocks: the whole group).
    size_t best_heads = 1;
    size_t best_cost = ~size_t{0};
    for (size_t d = 1; d <= group; ++d) {
      if (group % d != 0) continue;
      const size_t tasks = blocks_.size() * (op.p.n_head / d);
      const size_t cost = (tasks + threads - 1) / threads * (1 + d);
      if (cost <= best_cost) {
        best_cost = cost;
        best_heads = d;
      }
    }
    heads_per_task_[s] = best_heads;
    stage_tasks_[s] = blocks_.size() * (op.p.n_head / heads_per_task_[s]);
    head_dim_k = std::max(head_dim_k, op.p.head_dim_k);
    head_dim_v = std::max(head_dim_v, op.p.head_dim_v);
  }
  const size_t scratch =
      attention_scratch_floats(kAttentionBlockRows * plan.max_group_heads, longest_span, head_dim_k, head_dim_v);
  for (auto& per_thread : scores_) {
    if (per_thread.size() < scratch) per_thread.resize(scratch);
  }
  if (n_counters_ < plan.stages.size()) {
    counters_.reset(new StageCounter[plan.stages.size()]);
    n_counters_ = plan.stages.size();
  }
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    counters_[s].claim.store(0, std::memory_order_relaxed);
    counters_[s].done.store(0, std::memory_order_relaxed);
  }
  // Fresh serials for this step's stages: no home slot holds one yet.
  serial_base_ = next_serial_;
  next_serial_ += plan.stages.size();
  next_tiles_.assign(plan.stages.size() + 1, kNoStage);
  for (size_t s = plan.stages.size(); s-- > 0;) {
    const Stage& stage = plan.stages[s];
    bool decode_tiles = stage.kind == StageKind::Tiles && !stage.tiles.empty();
    for (const TileEntry& tile : stage.tiles) decode_tiles = decode_tiles && tile.rows <= kGemvMaxRows;
    next_tiles_[s] = decode_tiles ? s : next_tiles_[s + 1];
  }
  failed_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
}

void CpuBackend::execute(const StepGraph& graph, const StepInputs& inputs) {
  const Plan& plan = plan_for(graph);
  prepare_step(plan, graph, inputs);
  // One parallel region: each pool thread joins once and walks every stage.
  // A thread that arrives late finds the stages done and leaves at once.
  const size_t n_threads = static_cast<size_t>(pool_->size());
  pool_->parallel_for(n_threads, [&](size_t, int thread) { run_region(plan, graph, inputs, thread); });
  if (error_) std::rethrow_exception(error_);
  const TensorDesc& logits = graph.tensor(graph.logits);
  const float* rows = f32(graph.logits);
  for (size_t i = 0; i < inputs.outputs.size(); ++i) {
    std::memcpy(inputs.outputs[i], rows + i * logits.cols, logits.cols * sizeof(float));
  }
  if (graph.hidden != kNoTensor) {
    const size_t n_embd = graph.tensor(graph.hidden).cols;
    const float* hidden = f32(graph.hidden);
    for (size_t r = 0; r < inputs.hidden.size(); ++r) {
      if (inputs.hidden[r] != nullptr) std::memcpy(inputs.hidden[r], hidden + r * n_embd, n_embd * sizeof(float));
    }
  }
}

// Claiming. Task t < threads of a stage is thread t's "home" task: its owner
// takes it first, through the owner's own slot (HomeSlot), so a stage
// starts without every thread racing for one shared counter (each claim an
// atomic read-modify-write on the same cache line, one thread after the
// other: at 16 threads the last got its task a microsecond or more after
// the first). The other tasks are claimed from the shared counter as they
// come. A home task whose owner does not show up (the OS has not scheduled
// it, or the workers are still waking at the start of a step) is taken over
// by a thread that has done its own tasks of the stage, or by a waiting one
// after a short spin, so nobody waits long on a thread that is not running. Knowing its next task ahead also lets a waiting thread
// prefetch that task's weights while the stage before runs (a decode step
// waits on a one-thread norm or activation before most of its matmuls).
bool CpuBackend::claim_home(size_t owner, uint64_t serial) {
  std::atomic<uint64_t>& slot = home_[owner].serial;
  uint64_t seen = slot.load(std::memory_order_relaxed);
  while (seen < serial) {
    if (slot.compare_exchange_weak(seen, serial, std::memory_order_acq_rel, std::memory_order_relaxed)) return true;
  }
  return false;
}

void CpuBackend::run_counted(const Plan& plan, size_t s, size_t task, const StepGraph& graph,
                             const StepInputs& inputs, int thread) {
  if (failed_.load(std::memory_order_relaxed)) return;
  try {
    run_task(plan, plan.stages[s], task, graph, inputs, thread);
  } catch (...) {
    // Only the first failure is kept; the remaining tasks are skipped
    // but still counted so that nobody waits forever.
    bool expected = false;
    if (failed_.compare_exchange_strong(expected, true)) error_ = std::current_exception();
  }
}

size_t CpuBackend::take_over(const Plan& plan, size_t s, size_t n_home, const StepGraph& graph,
                             const StepInputs& inputs, int thread) {
  size_t taken = 0;
  for (size_t u = 0; u < n_home; ++u) {
    if (home_[u].serial.load(std::memory_order_relaxed) < stage_serial(s) && claim_home(u, stage_serial(s))) {
      run_counted(plan, s, u, graph, inputs, thread);
      ++taken;
    }
  }
  return taken;
}

void CpuBackend::wait_for_stage(const Plan& plan, size_t s, const StepGraph& graph, const StepInputs& inputs,
                                int thread, Prefetch& prefetch) {
  const StageCounter& c = counters_[s];
  const size_t total = stage_tasks_[s];
  if (c.done.load(std::memory_order_acquire) >= total) return;
  // This thread's home task of the next decode matmul stage: its weights,
  // up to kPrefetchBytes (a quarter of a 1 MB L2), go into this core's L2
  // meanwhile.
  const size_t target = next_tiles_[s + 1];
  if (target != kNoStage && prefetch.stage != target) {
    prefetch.stage = target;
    prefetch.next = prefetch.end = nullptr;
    const size_t task = static_cast<size_t>(thread);
    const Stage& tiles = plan.stages[target];
    if (task < home_tasks(stage_tasks_[target])) {
      size_t e = tiles.tiles.size() - 1;
      while (tiles.tiles[e].first_task > task) --e;
      size_t bytes = 0;
      tiles.tiles[e].job.chunk_weights(task - tiles.tiles[e].first_task, &prefetch.next, &bytes);
      prefetch.end = prefetch.next + std::min(bytes, kPrefetchBytes);
    }
  }
  // Home tasks nobody claimed after a short spin are taken over: an owner
  // that is running claims its home task as soon as it sees the stage
  // before done (it either waits for it, like this thread, or is running a
  // task of an older stage: impossible, those are done), so one still
  // unclaimed is the home task of a thread that is descheduled or not yet
  // awake. (A claimed slot is only read: the scans cost a load per owner.)
  constexpr unsigned kTakeOverSpins = 32;
  const size_t n_home = home_tasks(total);
  for (unsigned idle = 0; c.done.load(std::memory_order_acquire) < total;) {
    if (prefetch.next < prefetch.end) {
      // Two lines (into L2) per turn: the loop keeps checking the stage's count.
      __builtin_prefetch(prefetch.next, 0, 2);
      __builtin_prefetch(prefetch.next + 64, 0, 2);
      prefetch.next += 128;
      continue;
    }
    if (++idle % kTakeOverSpins == 0) {
      const size_t taken = take_over(plan, s, n_home, graph, inputs, thread);
      if (taken != 0) counters_[s].done.fetch_add(taken, std::memory_order_acq_rel);
    }
    if (idle < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // the holder of a task may be descheduled
    }
  }
}

void CpuBackend::run_region(const Plan& plan, const StepGraph& graph, const StepInputs& inputs, int thread) {
  Prefetch prefetch;
  const size_t self = static_cast<size_t>(thread);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    // Every task of the previous stage done (tasks of stage s-1 started only
    // once s-2 was done, so all earlier stages are too).
    if (s > 0) wait_for_stage(plan, s - 1, graph, inputs, thread, prefetch);
    if (interrupt_check_installed() && !failed_.load(std::memory_order_relaxed)) {
      // Ctrl-C between stages: only the calling thread has a check installed
      // (core/interrupt.h). Stopping fails this forward like a failed task
      // (the others skip the rest); the session keeps its state.
      try {
        check_interrupt();
      } catch (...) {
        bool expected = false;
        if (failed_.compare_exchange_strong(expected, true)) error_ = std::current_exception();
      }
    }
    StageCounter& c = counters_[s];
    const size_t total = stage_tasks_[s];
    const size_t n_home = home_tasks(total);
    // A thread counts its completed tasks and publishes them once, when the
    // stage has no task left to claim: one write to `done` per thread and
    // stage instead of one per task (decode's matmul stages have ~4 small
    // tasks per thread). A thread that finds every task claimed already
    // leaves without writing to the counters.
    size_t completed = 0;
    if (self < n_home && claim_home(self, stage_serial(s))) {
      run_counted(plan, s, self, graph, inputs, thread);
      ++completed;
    }
    const size_t shared = total - n_home;  // tasks n_home.. come from the counter
    while (c.claim.load(std::memory_order_relaxed) < shared) {
      const size_t k = c.claim.fetch_add(1, std::memory_order_acq_rel);
      if (k >= shared) break;
      run_counted(plan, s, n_home + k, graph, inputs, thread);
      ++completed;
    }
    // Having worked for a while, a thread may take over at once what is
    // still unclaimed: a running owner would have claimed it by now.
    if (completed != 0 && n_home != 0) completed += take_over(plan, s, n_home, graph, inputs, thread);
    if (completed != 0) c.done.fetch_add(completed, std::memory_order_acq_rel);
  }
  // The last stage's home tasks of a thread that never came are taken over
  // here (the step's results are read once every region has returned).
  if (!plan.stages.empty()) wait_for_stage(plan, plan.stages.size() - 1, graph, inputs, thread, prefetch);
}

void CpuBackend::run_task(const Plan& plan, const Stage& stage, size_t task, const StepGraph& graph,
                          const StepInputs& inputs, int thread) {
  switch (stage.kind) {
    case StageKind::RopeAngles: {
      const size_t first = task * stage.rows_per_task;
      const size_t last = std::min(stage.rows, first + stage.rows_per_task);
      for (const RopeTable& table : plan.ropes) {
        const size_t n_pairs = table.freqs.n_pairs();
        float* cos = arena_.data() + table.offset;
        float* sin = cos + (stage.rows * n_pairs + 15) / 16 * 16;
        for (size_t r = first; r < last; ++r) {
          table.freqs.angles(static_cast<size_t>(inputs.positions[r]), cos + r * n_pairs, sin + r * n_pairs);
        }
      }
      return;
    }
    case StageKind::Chain: {
      const size_t row_task = task / stage.col_pieces;
      const size_t first = row_task * stage.rows_per_task;
      const size_t last = std::min(stage.rows, first + stage.rows_per_task);
      if (stage.col_pieces == 1) {
        for (size_t op : stage.ops) run_row_op(graph.ops[op], graph, inputs, first, last, 0, kWholeRow);
        for (const QuantizeEntry& q : stage.quantize) {
          q.job.quantize_rows(f32(q.x), first, last, act_base_ + q.act_offset);
        }
        return;
      }
      // A column piece of the rows (cpu_plan.h, split_chain_columns).
      const size_t col_first = (task % stage.col_pieces) * stage.piece_cols;
      for (size_t op : stage.ops) {
        run_row_op(graph.ops[op], graph, inputs, first, last, col_first, col_first + stage.piece_cols);
      }
      for (const QuantizeEntry& q : stage.quantize) {
        const size_t cols = q.job.n_in;
        const size_t col_last = std::min(cols, col_first + stage.piece_cols);
        for (size_t r = first; r < last; ++r) {
          q.job.quantize_cols(f32(q.x) + r * cols, col_first, col_last - col_first,
                              act_base_ + q.act_offset + r * q.job.act_row_bytes);
        }
      }
      (void)plan;
      return;
    }
    case StageKind::Quantize: {
      size_t t = task;
      for (const QuantizeEntry& q : stage.quantize) {
        const size_t n = quantize_tasks(q.rows);
        if (t < n) {
          const size_t first = t * kQuantizeRowsPerTask;
          q.job.quantize_rows(f32(q.x), first, std::min(q.rows, first + kQuantizeRowsPerTask), act_base_ + q.act_offset);
          return;
        }
        t -= n;
      }
      return;
    }
    case StageKind::Tiles: {
      // The tile entry whose task range holds `task` (a handful of entries).
      size_t e = stage.tiles.size() - 1;
      while (stage.tiles[e].first_task > task) --e;
      const TileEntry& tile = stage.tiles[e];
      tile.job.run_chunk(task - tile.first_task, act_base_ + tile.act_offset, tile.rows, f32(graph.ops[tile.op].dst));
      return;
    }
    case StageKind::Attention:
      run_attention_task(graph.ops[stage.ops[0]], task, static_cast<size_t>(&stage - plan.stages.data()), inputs,
                         thread);
      return;
  }
}

void CpuBackend::run_row_op(const Op& op, const StepGraph& graph, const StepInputs& inputs, size_t first,
                            size_t last, size_t col_first, size_t col_last) {
  switch (op.kind) {
    case OpKind::GetRows: {
      const TensorDesc& table = graph.tensor(op.src[0]);
      const int32_t* ids = ints(op.src[1], graph, inputs);
      float* dst = f32(op.dst);
      const size_t cols = table.cols;
      if (table.kind == TensorKind::Weight) {
        const TensorInfo& w = weights_.matrices[table.weight];
        const size_t row_bytes_w = static_cast<size_t>(row_bytes(w.type, w.ne[0]));
        for (size_t r = first; r < last; ++r) {
          ref::dequantize_row(w.type, w.data + static_cast<size_t>(ids[r]) * row_bytes_w, dst + r * cols, cols);
        }
      } else {
        const float* src = f32(op.src[0]);
        for (size_t r = first; r < last; ++r) {
          std::memcpy(dst + r * cols, src + static_cast<size_t>(ids[r]) * cols, cols * sizeof(float));
        }
      }
      return;
    }
    case OpKind::RmsNorm: {
      const size_t cols = graph.tensor(op.dst).cols;
      const size_t group = op.p.group;
      const float* x = f32(op.src[0]);
      float* dst = f32(op.dst);
      const float* w = weights_.vectors[graph.tensor(op.src[1]).weight].data();
      // The rows' groups (cols / group of them per row) lie back to back.
      rms_norm_rows(x + first * cols, group, w, group, op.p.eps, dst + first * cols, group,
                    (last - first) * (cols / group));
      return;
    }
    case OpKind::Add: {
      const size_t cols = graph.tensor(op.dst).cols;
      const size_t c0 = col_first, n = std::min(cols, col_last) - c0;
      const TensorDesc& b = graph.tensor(op.src[1]);
      const float* a = f32(op.src[0]);
      float* dst = f32(op.dst);
      for (size_t r = first; r < last; ++r) {
        const float* br = b.kind == TensorKind::Weight ? weights_.vectors[b.weight].data() : f32(op.src[1]) + r * cols;
        if (dst != a) std::memcpy(dst + r * cols + c0, a + r * cols + c0, n * sizeof(float));
        add_to(dst + r * cols + c0, br + c0, n);
      }
      return;
    }
    case OpKind::Scale: {
      const size_t cols = graph.tensor(op.dst).cols;
      const size_t c1 = std::min(cols, col_last);
      const float* x = f32(op.src[0]);
      float* dst = f32(op.dst);
      const float factor = op.p.scalar;
      for (size_t r = first; r < last; ++r) {
        for (size_t i = col_first; i < c1; ++i) dst[r * cols + i] = x[r * cols + i] * factor;
      }
      return;
    }
    case OpKind::Rope: {
      const size_t cols = graph.tensor(op.dst).cols;
      const float* x = f32(op.src[0]);
      float* dst = f32(op.dst);
      const RopeTable& table = plan_->ropes[plan_->op_rope[&op - graph.ops.data()]];
      const size_t n_pairs = table.freqs.n_pairs();
      const float* cos = arena_.data() + table.offset;
      const float* sin = cos + (graph.shape.n_rows * n_pairs + 15) / 16 * 16;
      for (size_t r = first; r < last; ++r) {
        if (dst != x) std::memcpy(dst + r * cols, x + r * cols, cols * sizeof(float));
        rope_heads(dst + r * cols, op.p.n_head, op.p.head_dim_k, op.p.n_rot, op.p.rope_style, cos + r * n_pairs,
                   sin + r * n_pairs);
      }
      return;
    }
    case OpKind::Glu: {
      const size_t cols = graph.tensor(op.dst).cols;
      const size_t c0 = col_first, n = std::min(cols, col_last) - c0;
      const float* gate = f32(op.src[0]);
      const float* up = f32(op.src[1]);
      float* dst = f32(op.dst);
      const auto fn = op.p.glu == GluKind::Silu ? activations_.swiglu : activations_.geglu;
      for (size_t r = first; r < last; ++r) {
        if (dst != gate) std::memcpy(dst + r * cols + c0, gate + r * cols + c0, n * sizeof(float));
        fn(dst + r * cols + c0, up + r * cols + c0, n);
      }
      return;
    }
    case OpKind::Softcap: {
      const size_t cols = graph.tensor(op.dst).cols;
      const size_t c0 = col_first, n = std::min(cols, col_last) - c0;
      const float* x = f32(op.src[0]);
      float* dst = f32(op.dst);
      for (size_t r = first; r < last; ++r) {
        if (dst != x) std::memcpy(dst + r * cols + c0, x + r * cols + c0, n * sizeof(float));
        softcap(dst + r * cols + c0, n, op.p.scalar);
      }
      return;
    }
    case OpKind::SliceCols: {
      const size_t cols = graph.tensor(op.dst).cols;
      const size_t src_cols = graph.tensor(op.src[0]).cols;
      const float* x = f32(op.src[0]);
      float* dst = f32(op.dst);
      for (size_t r = first; r < last; ++r) {
        std::memcpy(dst + r * cols, x + r * src_cols + op.p.offset, cols * sizeof(float));
      }
      return;
    }
    case OpKind::KvStore: {
      // The row's keys and values go through the f16 cache before anyone
      // reads them, so a row attends to exactly the bits a later decode will.
      const size_t k_cols = graph.tensor(op.src[0]).cols;
      const size_t v_cols = graph.tensor(op.src[1]).cols;
      const float* k = f32(op.src[0]);
      const float* v = f32(op.src[1]);
      const uint32_t il = op.p.layer;
      for (size_t r = first; r < last; ++r) {
        const size_t slot = inputs.row_slot[r];
        if (!inputs.slot_writes[slot]) continue;
        const size_t row = inputs.slots[slot]->plane_row(il, static_cast<size_t>(inputs.positions[r]));
        f16_.to_f16(k + r * k_cols, slot_storage_[slot]->k_row(il, row), k_cols);
        f16_.to_f16(v + r * v_cols, slot_storage_[slot]->v_row(il, row), v_cols);
      }
      return;
    }
    case OpKind::MatMul:
    case OpKind::Attention:
      break;
  }
  throw InternalError(std::string("[cpu backend] ") + op_name(op.kind) + " is not a per-row op");
}

void CpuBackend::run_attention_task(const Op& op, size_t task, size_t stage_index, const StepInputs& inputs,
                                    int thread) {
  // A task: a block of up to kAttentionBlockRows consecutive rows of one
  // sequence times some query heads of one KV group. Each task converts a
  // key/value row once for all its queries; how tasks are cut changes no bits.
  const OpParams& p = op.p;
  const size_t heads_per_task = heads_per_task_[stage_index];
  const size_t tasks_per_block = p.n_head / heads_per_task;
  const size_t group = p.n_head / p.n_head_kv;
  const size_t q_width = p.n_head * p.head_dim_k;
  const size_t attn_width = p.n_head * p.head_dim_v;
  // Tasks are claimed in index order; the last blocks of a sequence read the
  // most positions, so they go first and the stage ends on short tasks (a
  // prefill's blocks grow linearly; claimed oldest first, the last round
  // left threads idle for up to one long task).
  const size_t order = stage_tasks_[stage_index] - 1 - task;
  const AttentionBlock& block = blocks_[order / tasks_per_block];
  const size_t first_head = (order % tasks_per_block) * heads_per_task;
  AttentionKv head;
  head.head_dim_k = p.head_dim_k;
  head.head_dim_v = p.head_dim_v;
  head.scale = p.scalar;
  head.k_offset = (first_head / group) * p.head_dim_k;
  head.v_offset = (first_head / group) * p.head_dim_v;
  const KvState& state = *inputs.slots[block.slot];
  KvPlanes planes;
  planes.storage = slot_storage_[block.slot];
  planes.layer = p.layer;
  planes.ring_rows = state.layout().layers[p.layer].window != 0 ? state.ring_rows() : 0;
  const float* q = f32(op.src[0]);
  float* out = f32(op.dst);
  AttentionQuery queries[kAttentionBlockRows * kMaxGroupHeads];
  size_t n_queries = 0;
  for (size_t r = block.first_row; r < block.first_row + block.n_rows; ++r) {
    const size_t position = static_cast<size_t>(inputs.positions[r]);
    const size_t first = p.window > 0 && position + 1 > p.window ? position + 1 - p.window : 0;
    for (size_t h = first_head; h < first_head + heads_per_task; ++h) {
      AttentionQuery& query = queries[n_queries++];
      query.q = q + r * q_width + h * p.head_dim_k;
      query.out = out + r * attn_width + h * p.head_dim_v;
      query.first = first;
      query.last = position;
    }
  }
  attend_block(planes, head, queries, n_queries, f16_, scores_[static_cast<size_t>(thread)].data());
  // The heads just written, quantized for the matmul that reads them
  // (cpu_plan.h): head h of row r is columns [h * head_dim_v, + head_dim_v).
  for (const QuantizeEntry& entry : plan_->stages[stage_index].quantize) {
    uint8_t* act = act_base_ + entry.act_offset;
    for (size_t r = block.first_row; r < block.first_row + block.n_rows; ++r) {
      entry.job.quantize_cols(out + r * attn_width, first_head * p.head_dim_v, heads_per_task * p.head_dim_v,
                              act + r * entry.job.act_row_bytes);
    }
  }
}

}  // namespace muser::cpu
