// Scratch memory an encode call borrows from its thread and gives back for
// the thread's next call.
//
// A call on a long text needs tens of megabytes of work buffers (code
// points, pieces, words, symbols, ids). Allocated afresh each call, they
// came back from the allocator as fresh pages: on random Unicode a page
// fault every ~4 KB cost about a quarter of the call. Keeping them between
// calls removes that; the bound keeps what a thread holds between calls
// small enough for a library: buffers that grew past it (a call on a huge
// text) are freed when the call ends, as before.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

namespace muser {

// What a thread may keep between encode calls, per kind of scratch (BPE
// work buffers; the ids of the last call).
constexpr size_t kKeptScratchBytes = size_t{48} << 20;

// Lends the scratch in `slot` (the calling thread's) for one call, or a new
// one when the slot is empty (first call, or a call nested in another);
// gives it back when done unless it holds more than `keep_bytes`.
// `T` needs capacity_bytes().
template <typename T>
class ScratchLease {
 public:
  ScratchLease(std::unique_ptr<T>& slot, size_t keep_bytes) : slot_(slot), keep_bytes_(keep_bytes) {
    held_ = slot ? std::move(slot) : std::make_unique<T>();
  }
  ~ScratchLease() {
    if (held_->capacity_bytes() <= keep_bytes_) slot_ = std::move(held_);
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;

  T& operator*() const { return *held_; }
  T* operator->() const { return held_.get(); }

 private:
  std::unique_ptr<T>& slot_;
  size_t keep_bytes_;
  std::unique_ptr<T> held_;
};

}  // namespace muser
