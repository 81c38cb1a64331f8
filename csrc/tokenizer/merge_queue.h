// The priority queue of the BPE and SentencePiece merge loops for long words.
//
// Both loops repeatedly take the candidate pair with the best priority, the
// leftmost among equals, from a binary heap. On a word of a million symbols
// (a run of spaces is one pre-tokenizer word) that heap holds about a million
// entries and every pop walks ~20 levels of it with a cache miss at most of
// them: ~1,600 instructions per character. This queue pops the very same
// sequence of entries, cheaper:
//  - one bucket per distinct priority (a word touches few: the merges that
//    can apply to its characters), found through a small hash table, and a
//    small heap of the priorities whose bucket is not empty;
//  - in a bucket, entries ordered by `left`. The loops push in nearly
//    ascending `left` order (they sweep left to right within a priority), so
//    a bucket is a sorted run popped from its front, plus a heap for the few
//    entries that arrive out of order.
// The pop order is exactly ascending (priority, left); the merge loops never
// hold two live entries with the same priority and `left` (a symbol's id and
// its right neighbour change together), so equal keys, which a heap would
// order arbitrarily, only ever involve stale entries, which both loops skip.
//
// `Entry` needs an `int32_t left` member. Not thread-safe; one per encode call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace muser {

template <typename Entry>
class MergeQueue {
 public:
  // Empties the queue, keeping its memory for the next word.
  void clear() {
    for (size_t b = 0; b < used_; ++b) buckets_[b].reset();
    used_ = 0;
    active_.clear();
    std::fill(table_.begin(), table_.end(), TableSlot{});
  }

  bool empty() const { return active_.empty(); }

  // Bytes of memory held (for the per-thread scratch bound).
  size_t capacity_bytes() const {
    size_t bytes = buckets_.capacity() * sizeof(Bucket) + active_.capacity() * sizeof(uint32_t) +
                   table_.capacity() * sizeof(TableSlot);
    for (const Bucket& b : buckets_) bytes += (b.run.capacity() + b.late.capacity()) * sizeof(Entry);
    return bytes;
  }

  // Lower priorities pop first; among equal priorities, lower `left` first.
  void push(uint32_t priority, const Entry& entry) {
    Bucket& bucket = buckets_[bucket_of(priority)];
    if (bucket.size() == 0) {
      active_.push_back(priority);
      std::push_heap(active_.begin(), active_.end(), std::greater<uint32_t>{});
    }
    if (bucket.run.size() == bucket.head || bucket.run.back().left <= entry.left) {
      bucket.run.push_back(entry);
    } else {
      bucket.late.push_back(entry);
      std::push_heap(bucket.late.begin(), bucket.late.end(), LaterLeft{});
    }
  }

  // Removes the first entry into `out`; false when the queue is empty.
  bool pop(Entry& out) {
    if (active_.empty()) return false;
    Bucket& bucket = buckets_[bucket_of(active_.front())];
    const bool from_run = bucket.head < bucket.run.size() &&
                          (bucket.late.empty() || bucket.run[bucket.head].left <= bucket.late.front().left);
    if (from_run) {
      out = bucket.run[bucket.head++];
    } else {
      std::pop_heap(bucket.late.begin(), bucket.late.end(), LaterLeft{});
      out = bucket.late.back();
      bucket.late.pop_back();
    }
    if (bucket.size() == 0) {
      bucket.reset();
      std::pop_heap(active_.begin(), active_.end(), std::greater<uint32_t>{});
      active_.pop_back();
    }
    return true;
  }

 private:
  struct LaterLeft {  // heap order: the smallest `left` on top
    bool operator()(const Entry& a, const Entry& b) const { return a.left > b.left; }
  };
  struct Bucket {
    std::vector<Entry> run;   // ascending `left`; [head, end) not yet popped
    size_t head = 0;
    std::vector<Entry> late;  // heap under LaterLeft
    size_t size() const { return run.size() - head + late.size(); }
    void reset() {
      run.clear();
      head = 0;
      late.clear();
    }
  };
  struct TableSlot {
    uint32_t priority = 0;
    int32_t bucket = -1;  // -1: empty
  };

  // The bucket of `priority`, created (empty) on first use.
  size_t bucket_of(uint32_t priority) {
    if (table_.empty() || 2 * (used_ + 1) > table_.size()) grow();
    const size_t mask = table_.size() - 1;
    for (size_t i = hash(priority) & mask;; i = (i + 1) & mask) {
      TableSlot& slot = table_[i];
      if (slot.bucket < 0) {
        if (used_ == buckets_.size()) buckets_.emplace_back();
        slot = TableSlot{priority, static_cast<int32_t>(used_)};
        return used_++;
      }
      if (slot.priority == priority) return static_cast<size_t>(slot.bucket);
    }
  }

  void grow() {
    std::vector<TableSlot> old;
    old.swap(table_);
    table_.assign(std::max<size_t>(64, 2 * old.size()), TableSlot{});
    const size_t mask = table_.size() - 1;
    for (const TableSlot& slot : old) {
      if (slot.bucket < 0) continue;
      size_t i = hash(slot.priority) & mask;
      while (table_[i].bucket >= 0) i = (i + 1) & mask;
      table_[i] = slot;
    }
  }

  static size_t hash(uint32_t priority) { return static_cast<size_t>((priority * 0x9E3779B97F4A7C15ULL) >> 32); }

  std::vector<Bucket> buckets_;  // [0, used_) belong to priorities in table_
  size_t used_ = 0;
  std::vector<uint32_t> active_;  // min-heap: priorities whose bucket is not empty
  std::vector<TableSlot> table_;  // priority -> bucket, open addressing
};

// The plain binary heap over `Order` (a max-heap comparator, as
// std::push_heap takes it) with MergeQueue's interface: the queue of short
// words, over a vector the caller keeps between words. `priority` is unused:
// `Order` reads it from the entry.
template <typename Entry, typename Order>
struct HeapMergeQueue {
  std::vector<Entry>& heap;

  void push(uint32_t /*priority*/, const Entry& entry) {
    heap.push_back(entry);
    std::push_heap(heap.begin(), heap.end(), Order{});
  }
  bool pop(Entry& out) {
    if (heap.empty()) return false;
    std::pop_heap(heap.begin(), heap.end(), Order{});
    out = heap.back();
    heap.pop_back();
    return true;
  }
};

}  // namespace muser
