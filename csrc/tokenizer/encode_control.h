// What one Tokenizer::encode call is told besides its text: a cancel token to
// honour, and (for tests) which queue the merge loops use.
//
// Encoding is linear, but a 16 Mi-character prompt still takes a second or
// more; inside a request with a deadline it must stop when the request does.
// The loops report their work here (bytes of text, merge steps) and every
// kCheckEvery units the token is read, which costs a clock read, so the
// check is cheap next to the work between two checks (tens of microseconds).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cancel_token.h"
#include "core/error.h"

namespace muser {

// Which priority queue the BPE and SentencePiece merge loops use. Both give
// the same tokens; Auto takes the binary heap for short words and the
// bucketed MergeQueue (merge_queue.h) for long ones. Heap and Buckets force
// one for every word, so tests can compare them.
enum class MergeQueueKind { Auto, Heap, Buckets };

class EncodeControl {
 public:
  explicit EncodeControl(const CancelToken* cancel = nullptr, MergeQueueKind queue = MergeQueueKind::Auto)
      : cancel_(cancel), queue_(queue) {
    check_now();  // a request already past its deadline does no work at all
  }

  // Words of at least this many symbols use the bucketed queue under Auto:
  // below it the heap is small and cache-resident, and cheaper to set up.
  static constexpr size_t kLongWordSymbols = 256;

  bool use_buckets(size_t symbols) const {
    return queue_ == MergeQueueKind::Buckets || (queue_ == MergeQueueKind::Auto && symbols >= kLongWordSymbols);
  }

  // Counts `units` of work (a byte of text, a merge step); throws Cancelled
  // once the token reads as cancelled (also when its deadline has passed).
  void work(size_t units) {
    if (cancel_ == nullptr) return;
    since_check_ += units;
    if (since_check_ >= kCheckEvery) {
      since_check_ = 0;
      check_now();
    }
  }

 private:
  static constexpr size_t kCheckEvery = 16 * 1024;

  void check_now() const {
    if (cancel_ != nullptr && cancel_->cancelled()) {
      throw Cancelled(cancel_->deadline_passed() ? "[tokenizer] encode: the deadline passed while tokenizing"
                                                 : "[tokenizer] encode: cancelled while tokenizing");
    }
  }

  const CancelToken* cancel_;
  MergeQueueKind queue_;
  size_t since_check_ = 0;
};

}  // namespace muser
