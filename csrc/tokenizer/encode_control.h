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
// bucketed MergeQueue (merge_queue.h) for long ones, and BPE words made of
// one repeated byte take the run shortcut (byte_runs.h) where it applies.
// Heap and Buckets force one queue for every word and never take the
// shortcut (the general loop); ByteRuns is Auto with the shortcut at every
// run length, so tests can compare them all.
enum class MergeQueueKind { Auto, Heap, Buckets, ByteRuns };

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
    return queue_ == MergeQueueKind::Buckets ||
           ((queue_ == MergeQueueKind::Auto || queue_ == MergeQueueKind::ByteRuns) && symbols >= kLongWordSymbols);
  }

  // Runs of one byte shorter than this merge through the queue under Auto:
  // the shortcut walks every merge of the byte's runs, which costs more
  // than a few pops (and short runs mostly hit the word memo anyway).
  static constexpr size_t kMinRunShortcutBytes = 16;

  // Whether a BPE word of `bytes` copies of one byte, whose runs have
  // `run_merges` merges, takes the run shortcut. Under Auto only from a
  // length at which its work (about run_merges steps) stays below the
  // general loop's (a few steps per byte).
  bool use_byte_runs(size_t bytes, size_t run_merges) const {
    if (queue_ == MergeQueueKind::ByteRuns) return true;
    return queue_ == MergeQueueKind::Auto && bytes >= kMinRunShortcutBytes && 4 * bytes >= run_merges;
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
