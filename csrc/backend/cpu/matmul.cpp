#include "backend/cpu/matmul.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <string>

#include "core/error.h"
#include "tensor/dtype.h"
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

// packed: null, or w's pack made with `kernels`.
void matmul_with(const TensorInfo& w, const PackedWeight* packed, const float* x, size_t n_rows, float* y,
                 ThreadPool& pool, const KernelSet& kernels) {
  require_2d(w, "matmul");
  const uint32_t type_id = static_cast<uint32_t>(w.type);
  const TileFn tile = type_id < kMaxTypeId ? kernels.tile[type_id] : nullptr;
  if (tile == nullptr) {
    throw InvalidArgument(format_where("matmul", std::string("no ") + isa_name(kernels.isa) +
                                                     " kernel for " + dtype_info(w.type).name));
  }
  if (n_rows == 0) return;

  const size_t n_in = static_cast<size_t>(w.ne[0]);
  const size_t n_out = static_cast<size_t>(w.ne[1]);
  const size_t w_row_bytes = static_cast<size_t>(row_bytes(w.type, w.ne[0]));

  // Each activation row is quantized once, independently of the others, so
  // its bytes do not depend on n_rows or on the threads.
  const ActivationFormat format = activation_format(w.type);
  const size_t act_row_bytes = activation_row_bytes(format, n_in);
  AlignedBytes act = allocate_aligned(act_row_bytes * n_rows);
  const QuantizeFn quantize = kernels.quantize[static_cast<uint32_t>(format)];
  const auto quantize_rows = [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) quantize(x + r * n_in, act.get() + r * act_row_bytes, n_in);
  };
  if (n_rows <= kQuantizeRowsPerTask || pool.size() == 1) {
    quantize_rows(0, n_rows);
  } else {
    const size_t n_tasks = (n_rows + kQuantizeRowsPerTask - 1) / kQuantizeRowsPerTask;
    pool.parallel_for(n_tasks, [&](size_t task, int) {
      const size_t first = task * kQuantizeRowsPerTask;
      quantize_rows(first, std::min(n_rows, first + kQuantizeRowsPerTask));
    });
  }

  // Split the output rows into fixed chunks; every element's value is
  // independent of the split (KernelSet contract), so only speed depends on it.
  const size_t threads = static_cast<size_t>(pool.size());
  size_t chunk = (n_out + threads * kTasksPerThread - 1) / (threads * kTasksPerThread);
  chunk = (chunk + kChunkGranule - 1) / kChunkGranule * kChunkGranule;
  const size_t n_tasks = (n_out + chunk - 1) / chunk;
  const uint8_t* act_bytes = act.get();
  if (packed != nullptr) {
    // Chunks start on a group boundary (kChunkGranule is a multiple of kPackedRows).
    const PackedTileFn packed_tile = packed->kernel().tile;
    pool.parallel_for(n_tasks, [&](size_t task, int) {
      const size_t first = task * chunk;
      const size_t rows = std::min(n_out, first + chunk) - first;
      packed_tile(n_in, packed->data() + first / kPackedRows * packed->group_bytes(), rows, act_bytes,
                  act_row_bytes, n_rows, y + first, n_out);
    });
    return;
  }
  pool.parallel_for(n_tasks, [&](size_t task, int) {
    // One tile call per chunk: the kernels block for the caches themselves
    // and may reorganize the activation rows once per call.
    const size_t first = task * chunk;
    const size_t rows = std::min(n_out, first + chunk) - first;
    tile(n_in, w.data + first * w_row_bytes, w_row_bytes, rows, act_bytes, act_row_bytes, n_rows,
         y + first, n_out);
  });
}

}  // namespace

void matmul(const TensorInfo& w, const float* x, size_t n_rows, float* y, ThreadPool& pool,
            const KernelSet& kernels) {
  matmul_with(w, nullptr, x, n_rows, y, pool, kernels);
}

void matmul(const TensorInfo& w, const float* x, size_t n_rows, float* y, ThreadPool& pool) {
  matmul_with(w, nullptr, x, n_rows, y, pool, kernel_set(best_isa()));
}

void matmul(const PackedWeight& w, const float* x, size_t n_rows, float* y, ThreadPool& pool) {
  matmul_with(w.source(), &w, x, n_rows, y, pool, w.kernels());
}

void matmul(const TensorInfo& w, const PackedWeights& packs, const float* x, size_t n_rows, float* y,
            ThreadPool& pool) {
  const PackedWeight* packed = packs.find(w);
  if (packed != nullptr) {
    matmul_with(w, packed, x, n_rows, y, pool, packed->kernels());
  } else {
    matmul_with(w, nullptr, x, n_rows, y, pool, kernel_set(best_isa()));
  }
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
