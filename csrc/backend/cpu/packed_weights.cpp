#include "backend/cpu/packed_weights.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "core/error.h"
#include "tensor/dtype.h"

namespace muser::cpu {
namespace {

// Groups packed per pool task: large enough to amortize the hand-out, small
// enough to balance a tensor of a few hundred groups over the threads.
constexpr size_t kGroupsPerTask = 64;

// Packs of a few MB and up are placed on 2 MiB boundaries and offered to
// transparent huge pages: first-touching a large pack 4 KiB at a time was most
// of its packing cost (one page fault per 4 KiB), and huge pages also spare
// the TLB when a decode streams the pack.
constexpr size_t kHugePage = size_t{2} << 20;

uint8_t* allocate_pack(size_t bytes) {
  const size_t alignment = bytes >= 2 * kHugePage ? kHugePage : 64;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (alignment == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advice only; failure is harmless
#endif
  return static_cast<uint8_t*>(p);
}

// Once packed, a tensor's GGUF bytes are not read by matmul again; the pages
// this process faulted in while packing would stay resident beside the pack.
// Dropping them from this process keeps the resident cost of a pack at its
// own size. Only for a read-only file mapping (the page cache keeps the data,
// and a later reader, such as the embedding lookup of a tied output table,
// faults it back in); on anonymous memory this would zero the bytes. Only
// whole pages inside the tensor are dropped.
void release_source_pages(const TensorInfo& w) {
#if defined(__linux__) && defined(MADV_DONTNEED)
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(w.data);
  const uintptr_t first = (begin + static_cast<uintptr_t>(page) - 1) / static_cast<uintptr_t>(page) * static_cast<uintptr_t>(page);
  const uintptr_t last = (begin + w.n_bytes) / static_cast<uintptr_t>(page) * static_cast<uintptr_t>(page);
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);  // advice only
#else
  (void)w;
#endif
}

}  // namespace

bool has_packed_layout(const KernelSet& kernels, DType type) {
  const uint32_t id = static_cast<uint32_t>(type);
  return id < kMaxTypeId && kernels.packed[id].group_bytes != nullptr;
}

PackedWeight::PackedWeight(const TensorInfo& w, const KernelSet& kernels, ThreadPool& pool)
    : source_(w), kernels_(kernels) {
  if (!has_packed_layout(kernels, w.type)) {
    throw InvalidArgument(format_where("pack_weight", std::string("no ") + isa_name(kernels.isa) +
                                                          " packed layout for " + dtype_info(w.type).name));
  }
  const DTypeInfo& info = dtype_info(w.type);
  if (w.ne[2] != 1 || w.ne[3] != 1 || w.ne[0] == 0 || w.ne[0] % info.block_elems != 0 ||
      w.data == nullptr || w.n_bytes < row_bytes(w.type, w.ne[0]) * w.ne[1]) {
    throw InvalidArgument(format_where(
        "pack_weight", "tensor '" + std::string(w.name) + "' is not a 2-D " + info.name +
                           " tensor with whole blocks per row and all its bytes"));
  }
  const size_t n_in = static_cast<size_t>(w.ne[0]);
  const size_t n_out = static_cast<size_t>(w.ne[1]);
  const size_t w_row_bytes = static_cast<size_t>(row_bytes(w.type, w.ne[0]));
  const PackedKernel& packed = kernel();
  group_bytes_ = packed.group_bytes(n_in);
  const size_t n_groups = (n_out + kPackedRows - 1) / kPackedRows;
  bytes_ = group_bytes_ * n_groups;
  data_ = allocate_pack(bytes_);
  const size_t n_tasks = (n_groups + kGroupsPerTask - 1) / kGroupsPerTask;
  try {
    pool.parallel_for(n_tasks, [&](size_t task, int) {
      const size_t last = std::min(n_groups, (task + 1) * kGroupsPerTask);
      for (size_t g = task * kGroupsPerTask; g < last; ++g) {
        const size_t first_row = g * kPackedRows;
        packed.pack_group(n_in, w.data + first_row * w_row_bytes, w_row_bytes,
                          std::min(kPackedRows, n_out - first_row), data_ + g * group_bytes_);
      }
    });
  } catch (...) {
    std::free(data_);
    throw;
  }
}

PackedWeight::~PackedWeight() { std::free(data_); }

PackedWeights::PackedWeights(const std::vector<const TensorInfo*>& tensors, const KernelSet& kernels,
                             ThreadPool& pool, SourcePages source_pages) {
  for (const TensorInfo* t : tensors) {
    if (t == nullptr || by_tensor_.count(t) != 0 || !has_packed_layout(kernels, t->type)) continue;
    packs_.push_back(std::make_unique<PackedWeight>(*t, kernels, pool));
    by_tensor_.emplace(t, packs_.back().get());
    if (source_pages == SourcePages::ReleaseMapped) release_source_pages(*t);
  }
}

const PackedWeight* PackedWeights::find(const TensorInfo& w) const {
  const auto it = by_tensor_.find(&w);
  return it == by_tensor_.end() ? nullptr : it->second;
}

size_t PackedWeights::bytes() const {
  size_t total = 0;
  for (const auto& p : packs_) total += p->bytes();
  return total;
}

}  // namespace muser::cpu
