// Weights repacked once, at load, into a kernel table's interleaved layout
// (kernel_set.h, PackedKernel) for the types and instruction sets whose
// kernels gain from it; everything else stays the zero-copy GGUF view.
//
// A pack is a private copy (the mmap is read-only and other tables read the
// GGUF blocks), made with the table that will read it: matmul uses a pack
// only with that table, so instruction sets never mix layouts.
//
// Thread safety: immutable after construction; any number of threads may
// read one concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/cpu/kernel_set.h"
#include "core/thread_pool.h"
#include "weights/gguf_file.h"

namespace muser::cpu {

// Whether `kernels` has a packed layout for weights of `type`.
bool has_packed_layout(const KernelSet& kernels, DType type);

class PackedWeight {
 public:
  // Packs the 2-D tensor w (which must outlive this object) with the pool's
  // threads. Throws InvalidArgument when w is not a valid 2-D tensor or the
  // table has no packed layout for its type.
  PackedWeight(const TensorInfo& w, const KernelSet& kernels, ThreadPool& pool);
  ~PackedWeight();
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;

  const TensorInfo& source() const { return source_; }
  const KernelSet& kernels() const { return kernels_; }
  const PackedKernel& kernel() const { return kernels_.packed[static_cast<uint32_t>(source_.type)]; }
  // Group g (kPackedRows consecutive weight rows) starts at data() + g * group_bytes().
  const uint8_t* data() const { return data_; }
  size_t group_bytes() const { return group_bytes_; }
  size_t bytes() const { return bytes_; }

 private:
  const TensorInfo& source_;
  const KernelSet& kernels_;
  size_t group_bytes_ = 0;
  size_t bytes_ = 0;
  uint8_t* data_ = nullptr;  // 64-byte aligned, owned
};

// What happens to a packed tensor's own pages in this process.
enum class SourcePages {
  Keep,
  // The tensors are views of a read-only file mapping (the GGUF mmap): drop
  // their pages from this process once packed, so a pack does not cost its
  // size twice in resident memory. Readers still see the same bytes.
  ReleaseMapped,
};

// The packs of a model's matmul weights, keyed by the tensor each replaces.
class PackedWeights {
 public:
  PackedWeights() = default;
  // Packs each distinct tensor of `tensors` (nulls skipped) that `kernels`
  // has a layout for.
  PackedWeights(const std::vector<const TensorInfo*>& tensors, const KernelSet& kernels, ThreadPool& pool,
                SourcePages source_pages);

  // The pack of w, or null when w is used as it is.
  const PackedWeight* find(const TensorInfo& w) const;
  size_t count() const { return packs_.size(); }
  size_t bytes() const;

 private:
  std::vector<std::unique_ptr<PackedWeight>> packs_;
  std::unordered_map<const TensorInfo*, const PackedWeight*> by_tensor_;
};

}  // namespace muser::cpu
