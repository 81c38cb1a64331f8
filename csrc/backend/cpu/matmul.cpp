#include "backend/cpu/matmul.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "tensor/dtype.h"
#include "tensor/half_float.h"
#include "tensor/quant_blocks.h"
#include "tensor/reference_kernels.h"

namespace muser::cpu {
namespace {

// Output rows per parallel task are a multiple of this (the SIMD tiles work
// on groups of up to 4 weight rows).
constexpr size_t kChunkGranule = 16;
static_assert(kChunkGranule % kPackedRows == 0, "packed tiles start on a group boundary");
// Tasks per thread for load balance (the work per row is uniform, but the
// machine is shared with other processes).
constexpr size_t kTasksPerThread = 4;
// Activation rows quantized per task when several rows are quantized in
// parallel.
constexpr size_t kQuantizeRowsPerTask = 16;
// Smallest block of activation rows a task takes when a call's rows are
// split (a multiple of the kernels' 8-row tiles): smaller blocks would
// re-read the weight chunk for little work.
constexpr size_t kMinRowBlock = 32;

struct AlignedDelete {
  void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
using AlignedBytes = std::unique_ptr<uint8_t[], AlignedDelete>;

AlignedBytes allocate_aligned(size_t bytes) {
  return AlignedBytes(static_cast<uint8_t*>(::operator new[](bytes, std::align_val_t(64))));
}

void require_2d(const TensorInfo& w, const char* where) {
  if (w.ne[2] != 1 || w.ne[3] != 1) {
    throw InvalidArgument(format_where(
        where, "tensor '" + std::string(w.name) + "' must be 2-D, got shape [" +
                   std::to_string(w.ne[0]) + ", " + std::to_string(w.ne[1]) + ", " +
                   std::to_string(w.ne[2]) + ", " + std::to_string(w.ne[3]) + "]"));
  }
  const DTypeInfo& info = dtype_info(w.type);
  if (w.ne[0] == 0 || w.ne[0] % info.block_elems != 0) {
    throw InvalidArgument(format_where(
        where, "tensor '" + std::string(w.name) + "' row length " + std::to_string(w.ne[0]) +
                   " is not a positive multiple of the " + info.name + " block size " +
                   std::to_string(info.block_elems)));
  }
  if (w.data == nullptr || w.n_bytes < row_bytes(w.type, w.ne[0]) * w.ne[1]) {
    throw InvalidArgument(format_where(
        where, "tensor '" + std::string(w.name) + "' has no data or fewer bytes than its shape"));
  }
}

}  // namespace

namespace {

// Cuts a call of n_rows activation rows into row blocks x output chunks
// instead of output chunks over all rows, when that is quicker. Splitting
// moves no bit: each element is one weight row against one activation row
// (TileFn contract), whichever task computes it.
//
// A task reads its output chunk's weights and its rows' activations: over
// all rows, a 16-thread prefill of 512 rows through a 576 x 576 matrix
// (smollm2) was 36 tasks of 16 outputs, each reading all 389 KB of
// activations for 5 KB of weights (14 MB for the call, through L2 or L3),
// and its 36 tasks left the third round of 16 threads a quarter full. The
// split chosen minimises an estimate of the stage's time: rounds of tasks
// (ceil(tasks / threads)) times the largest task's multiply-adds plus its
// bytes (kMacsPerByte: a core's int8 multiply-adds per byte fetched from
// outside its L2, roughly), among splits of at least threads *
// kTasksPerThread tasks (slack for a shared machine) when there are any.
// For that example: 16 row blocks of 32 x 4 chunks of 144 outputs, 64
// equal tasks reading 4.5 MB.
constexpr double kMacsPerByte = 8.0;
constexpr size_t kMaxRowBlocks = 64;

// Calls of at most kGemvMaxRows rows on a pack: chunks of whole runs of
// groups, so each task reads its groups side by side (kernel_set.h,
// x86_kernels_512_packed_gemv.inc). A run is gemv_streams() groups, unless
// the matrix has so few groups that whole runs balance badly over the
// threads: the stage lasts about its rounds of tasks times the groups per
// task, and a run of s < gemv_streams() groups is taken when that cuts this
// by at least an eighth (fewer streams read a little slower, so a sliver of
// balance is not worth them). smollm2's o and down projections (576 rows:
// 36 groups) were 9 tasks of 4 groups: 3 rounds at 4 threads, the last one
// task long (3 threads idle), and at 16 threads one round with 7 threads
// idle; runs of 3 make 12 tasks of 3 groups (3 rounds of 3 groups at 4
// threads, one round at 16). llama-1b's matrices keep runs of 4 at 4 and 16
// threads. Only for a matmul alone in its stage: where several share one
// (q with k and v, gate with up) their tasks fill the threads together, and
// narrower runs only made more, smaller tasks (on the Xeon, smollm2 Q8_0
// single-row decode at 16 threads ran 470-545 tok/s with every matmul
// narrowed against 521-579 without, device call s6-2).
// Which task computes a row changes no bit.
void fit_decode_chunks(MatmulJob& job, size_t threads, size_t n_rows, bool shares_stage) {
  if (job.packed_tile == nullptr || n_rows == 0 || n_rows > kGemvMaxRows) return;
  const size_t groups = (job.n_out + kPackedRows - 1) / kPackedRows;
  const size_t want = (job.chunk + kPackedRows - 1) / kPackedRows;  // groups per task, kTasksPerThread per thread
  size_t best_run = 0, best_cost = 0;
  for (size_t run = gemv_streams(); run >= 1 && !(shares_stage && best_run != 0); --run) {
    const size_t chunk_groups = (want + run - 1) / run * run;
    const size_t tasks = (groups + chunk_groups - 1) / chunk_groups;
    const size_t cost = (tasks + threads - 1) / threads * chunk_groups;
    if (best_run == 0 || 8 * cost <= 7 * best_cost) {
      best_run = run;
      best_cost = cost;
    }
  }
  const size_t run_rows = kPackedRows * best_run;
  job.chunk = (job.chunk + run_rows - 1) / run_rows * run_rows;
  job.n_chunks = (job.n_out + job.chunk - 1) / job.chunk;
  job.out_chunks = job.n_chunks;
  // The stage ends when its last task does: with chunks of several runs
  // (kTasksPerThread per thread: llama-1b's 8192-wide down projection at 4
  // threads is 16 tasks of 590 KB of Q4_0, its output table 16 of 9.3 MB),
  // a thread that fell behind by a little still holds the others up for
  // up to a whole task. So the last half round of the work (threads x
  // chunk / 2 outputs, or all of it) is cut into one-run tasks, claimed
  // last (tasks go in index order), and the others' wait is at most one run.
  const size_t chunk_groups = job.chunk / kPackedRows;
  if (threads > 1 && chunk_groups > best_run) {
    const size_t tail_target = threads * chunk_groups / 2;
    const size_t head_chunks = groups > tail_target ? (groups - tail_target) / chunk_groups : 0;
    const size_t tail_groups = groups - head_chunks * chunk_groups;
    job.tail_first = head_chunks;
    job.tail_chunk = run_rows;
    job.n_chunks = head_chunks + (tail_groups + best_run - 1) / best_run;
    job.out_chunks = job.n_chunks;
  }
}

void split_rows(MatmulJob& job, size_t threads, size_t n_rows) {
  if (n_rows < 2 * kMinRowBlock) return;
  const size_t want = threads * kTasksPerThread;
  const size_t granules = (job.n_out + kChunkGranule - 1) / kChunkGranule;
  const size_t most_blocks = std::min(n_rows / kMinRowBlock, kMaxRowBlocks);
  bool best_enough = false;
  double best_cost = 0;
  size_t best_rows = 0, best_chunk = 0;
  size_t last_rows = 0;
  for (size_t b = 1; b <= most_blocks; ++b) {
    const size_t rows = b == 1 ? n_rows : ((n_rows + b - 1) / b + 7) / 8 * 8;
    if (rows == last_rows) continue;
    last_rows = rows;
    const size_t blocks = (n_rows + rows - 1) / rows;
    size_t last_chunks = 0;
    for (size_t g = 1; g <= granules; ++g) {
      const size_t chunk = g * kChunkGranule;
      const size_t chunks = (job.n_out + chunk - 1) / chunk;
      if (chunks == last_chunks) continue;  // the smallest chunk for this count came first
      last_chunks = chunks;
      const size_t tasks = blocks * chunks;
      const size_t outs = std::min(chunk, job.n_out);
      const double task = static_cast<double>(rows) * static_cast<double>(outs) * static_cast<double>(job.n_in) /
                              kMacsPerByte +
                          static_cast<double>(rows * job.act_row_bytes + outs * job.w_row_bytes);
      const double cost = static_cast<double>((tasks + threads - 1) / threads) * task;
      const bool enough = tasks >= want;
      if (best_rows == 0 || (enough && !best_enough) || (enough == best_enough && cost < best_cost)) {
        best_enough = enough;
        best_cost = cost;
        best_rows = rows;
        best_chunk = chunk;
      }
    }
  }
  job.chunk = best_chunk;
  job.out_chunks = (job.n_out + best_chunk - 1) / best_chunk;
  job.row_block = best_rows >= n_rows ? 0 : best_rows;
  job.n_chunks = job.out_chunks * ((n_rows + best_rows - 1) / best_rows);
}

}  // namespace

MatmulJob MatmulJob::plan(const TensorInfo& w, const KernelSet& kernels, size_t threads,
                          const PackedWeight* pack, size_t n_rows, bool shares_stage) {
  require_2d(w, "matmul");
  const uint32_t type_id = static_cast<uint32_t>(w.type);
  MatmulJob job;
  job.tile = type_id < kMaxTypeId ? kernels.tile[type_id] : nullptr;
  if (job.tile == nullptr) {
    throw InvalidArgument(format_where("matmul", std::string("no ") + isa_name(kernels.isa) +
                                                     " kernel for " + dtype_info(w.type).name));
  }
  job.n_in = static_cast<size_t>(w.ne[0]);
  job.n_out = static_cast<size_t>(w.ne[1]);
  job.w = w.data;
  job.w_row_bytes = static_cast<size_t>(row_bytes(w.type, w.ne[0]));
  const ActivationFormat format = activation_format(w.type);
  job.format = static_cast<uint32_t>(format);
  job.act_row_bytes = activation_row_bytes(format, job.n_in);
  job.quantize = kernels.quantize[static_cast<uint32_t>(format)];
  // Split the output rows into fixed chunks; every element's value is
  // independent of the split (KernelSet contract), so only speed depends on it.
  threads = std::max<size_t>(threads, 1);
  size_t chunk = (job.n_out + threads * kTasksPerThread - 1) / (threads * kTasksPerThread);
  job.chunk = (chunk + kChunkGranule - 1) / kChunkGranule * kChunkGranule;
  job.n_chunks = (job.n_out + job.chunk - 1) / job.chunk;
  job.out_chunks = job.n_chunks;
  if (pack != nullptr && &pack->source() == &w && &pack->kernels() == &kernels) {
    // Chunks start on a group boundary (kChunkGranule is a multiple of kPackedRows).
    job.packed_tile = pack->kernel().tile;
    job.packed = pack->data();
    job.packed_group_bytes = pack->group_bytes();
    if (format == ActivationFormat::Q8_0 || format == ActivationFormat::Q8_1) {
      // The rows carry their blocks' PackedActExtra (kernel_set.h).
      const size_t n_blocks = job.n_in / 32;
      job.act_extra_at = (job.act_row_bytes + kPackedActExtraAlign - 1) / kPackedActExtraAlign * kPackedActExtraAlign;
      job.act_row_bytes = job.act_extra_at + n_blocks * sizeof(PackedActExtra);
      job.format |= kPackedActFlag;
    }
  }
  fit_decode_chunks(job, threads, n_rows, shares_stage);
  split_rows(job, threads, n_rows);
  return job;
}


namespace {

// The PackedActExtra entries of one quantized Q8_0 / Q8_1 row.
template <typename Block>
void fill_packed_act_extras(const uint8_t* row, size_t n_blocks, PackedActExtra* extra) {
  const Block* blocks = reinterpret_cast<const Block*>(row);
  for (size_t b = 0; b < n_blocks; ++b) {
    extra[b].d = fp16_to_fp32(blocks[b].d);
    if constexpr (std::is_same_v<Block, BlockQ8_1>) {
      extra[b].s = fp16_to_fp32(blocks[b].s);
    } else {
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) sum += blocks[b].qs[j];
      extra[b].sum = sum;
    }
  }
}

}  // namespace

void MatmulJob::quantize_rows(const float* x, size_t first, size_t last, uint8_t* act) const {
  // Each activation row is quantized once, independently of the others, so
  // its bytes do not depend on n_rows or on the threads.
  for (size_t r = first; r < last; ++r) {
    uint8_t* row = act + r * act_row_bytes;
    quantize(x + r * n_in, row, n_in);
    if (act_extra_at == 0) continue;
    PackedActExtra* extra = reinterpret_cast<PackedActExtra*>(row + act_extra_at);
    if ((format & ~kPackedActFlag) == static_cast<uint32_t>(ActivationFormat::Q8_1)) {
      fill_packed_act_extras<BlockQ8_1>(row, n_in / 32, extra);
    } else {
      fill_packed_act_extras<BlockQ8_0>(row, n_in / 32, extra);
    }
  }
}

size_t MatmulJob::quantize_cols_granule() const {
  return activation_block_elems(static_cast<ActivationFormat>(format & ~kPackedActFlag));
}

void MatmulJob::quantize_cols(const float* x, size_t first, size_t n, uint8_t* act_row) const {
  const ActivationFormat base = static_cast<ActivationFormat>(format & ~kPackedActFlag);
  const size_t granule = activation_block_elems(base);
  if (first % granule != 0 || n % granule != 0 || first + n > n_in) {
    throw InternalError("[matmul] quantize_cols: columns " + std::to_string(first) + " + " + std::to_string(n) +
                        " are not whole blocks of a row of " + std::to_string(n_in));
  }
  quantize(x + first, act_row + activation_row_bytes(base, first), n);
  if (act_extra_at == 0) return;
  PackedActExtra* extra = reinterpret_cast<PackedActExtra*>(act_row + act_extra_at) + first / 32;
  const uint8_t* blocks = act_row + activation_row_bytes(base, first);
  if (base == ActivationFormat::Q8_1) {
    fill_packed_act_extras<BlockQ8_1>(blocks, n / 32, extra);
  } else {
    fill_packed_act_extras<BlockQ8_0>(blocks, n / 32, extra);
  }
}

void MatmulJob::run_chunk(size_t c, const uint8_t* act, size_t n_rows, float* y) const {
  // One tile call per chunk: the kernels block for the caches themselves
  // and may reorganize the activation rows once per call.
  if (row_block != 0) {
    // Task c: output chunk c % out_chunks of row block c / out_chunks (the
    // last block runs to n_rows, whatever n_rows the split was sized for).
    const size_t n_blocks = n_chunks / out_chunks;
    const size_t block = c / out_chunks;
    const size_t first_row = block * row_block;
    if (first_row >= n_rows) return;
    const size_t last_row = block + 1 == n_blocks ? n_rows : std::min(n_rows, first_row + row_block);
    act += first_row * act_row_bytes;
    y += first_row * n_out;
    n_rows = last_row - first_row;
    c %= out_chunks;
  }
  size_t first = 0, rows = 0;
  chunk_outputs(c, &first, &rows);
  if (packed_tile != nullptr) {
    packed_tile(n_in, packed + first / kPackedRows * packed_group_bytes, rows, act, act_row_bytes, n_rows,
                y + first, n_out);
    return;
  }
  tile(n_in, w + first * w_row_bytes, w_row_bytes, rows, act, act_row_bytes, n_rows, y + first, n_out);
}

void MatmulJob::chunk_outputs(size_t c, size_t* first, size_t* rows) const {
  const bool tail = tail_chunk != 0 && c >= tail_first;
  *first = tail ? tail_first * chunk + (c - tail_first) * tail_chunk : c * chunk;
  *rows = std::min(n_out, *first + (tail ? tail_chunk : chunk)) - *first;
}

void MatmulJob::chunk_weights(size_t c, const uint8_t** begin, size_t* bytes) const {
  if (row_block != 0) c %= out_chunks;
  size_t first = 0, rows = 0;
  chunk_outputs(c, &first, &rows);
  if (packed_tile != nullptr) {
    *begin = packed + first / kPackedRows * packed_group_bytes;
    *bytes = (rows + kPackedRows - 1) / kPackedRows * packed_group_bytes;
  } else {
    *begin = w + first * w_row_bytes;
    *bytes = rows * w_row_bytes;
  }
}

void matmul(const TensorInfo& w, const float* x, size_t n_rows, float* y, ThreadPool& pool,
            const KernelSet& kernels) {
  run_matmul(MatmulJob::plan(w, kernels, static_cast<size_t>(pool.size()), nullptr, n_rows), x, n_rows, y, pool);
}

void matmul(const PackedWeight& w, const float* x, size_t n_rows, float* y, ThreadPool& pool) {
  run_matmul(MatmulJob::plan(w.source(), w.kernels(), static_cast<size_t>(pool.size()), &w, n_rows), x, n_rows, y,
             pool);
}

void run_matmul(const MatmulJob& job, const float* x, size_t n_rows, float* y, ThreadPool& pool) {
  if (n_rows == 0) return;
  AlignedBytes act = allocate_aligned(job.act_row_bytes * n_rows);
  if (n_rows <= kQuantizeRowsPerTask || pool.size() == 1) {
    job.quantize_rows(x, 0, n_rows, act.get());
  } else {
    const size_t n_tasks = (n_rows + kQuantizeRowsPerTask - 1) / kQuantizeRowsPerTask;
    pool.parallel_for(n_tasks, [&](size_t task, int) {
      const size_t first = task * kQuantizeRowsPerTask;
      job.quantize_rows(x, first, std::min(n_rows, first + kQuantizeRowsPerTask), act.get());
    });
  }
  const uint8_t* act_bytes = act.get();
  pool.parallel_for(job.n_chunks, [&](size_t c, int) { job.run_chunk(c, act_bytes, n_rows, y); });
}

void matmul(const TensorInfo& w, const float* x, size_t n_rows, float* y, ThreadPool& pool) {
  matmul(w, x, n_rows, y, pool, kernel_set(best_isa()));
}

void dequantize_rows(const TensorInfo& w, const int32_t* row_ids, size_t n, float* out) {
  require_2d(w, "dequantize_rows");
  const size_t n_in = static_cast<size_t>(w.ne[0]);
  const size_t w_row_bytes = static_cast<size_t>(row_bytes(w.type, w.ne[0]));
  // Check every id before writing anything: on failure `out` is untouched.
  for (size_t k = 0; k < n; ++k) {
    const int32_t id = row_ids[k];
    if (id < 0 || static_cast<uint64_t>(id) >= w.ne[1]) {
      throw InvalidArgument(format_where(
          "dequantize_rows", "row id " + std::to_string(id) + " out of range for tensor '" +
                                 std::string(w.name) + "' with " + std::to_string(w.ne[1]) +
                                 " rows"));
    }
  }
  for (size_t k = 0; k < n; ++k) {
    const int32_t id = row_ids[k];
    ref::dequantize_row(w.type, w.data + static_cast<size_t>(id) * w_row_bytes, out + k * n_in,
                        n_in);
  }
}

}  // namespace muser::cpu
