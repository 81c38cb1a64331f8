// Word -> the ids it was already encoded to in this encode() call, for the
// BPE and SentencePiece encoders.
//
// Real text repeats a few thousand words over and over, so a bounded table
// keeps nearly every hit; text whose words are all distinct (random Unicode:
// hundreds of thousands of words in 1 MB) must not grow it past the cache, as
// a node-based map did (an allocation per word, and a miss on every lookup).
// So: open addressing over a fixed number of slots sized from the text (at
// most kMaxSlots), a lookup probes at most kProbes slots, and a word that
// finds them all taken replaces the first; forgetting a word costs only
// encoding it again.
// A slot is 32 bytes and holds short words whole: a word of up to 8 bytes
// is its key in the slot, and up to 4 ids are copied into it, so a hit on a
// short word (most words of prose, code and random ASCII) touches one cache
// line instead of three (slot, key arena, earlier output). Longer keys are
// copied into an arena (no allocation per word) of at most 1 MiB; when it is
// full the memo starts over. Longer results are a range of the output.
// Not thread-safe; one per encode call at a time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/token_maps.h"

namespace muser {

class WordMemo {
 public:
  // Words longer than this are not remembered (long words rarely repeat,
  // and hashing and copying them would cost more than it saves).
  static constexpr size_t kMaxWordBytes = 64;

  WordMemo() = default;
  explicit WordMemo(size_t text_bytes) { reset(text_bytes); }

  // Forgets every word and sizes the table for a text of `text_bytes`,
  // keeping the memory it already has (a memo kept between encode calls).
  void reset(size_t text_bytes) {
    size_t slots = 256;
    while (slots < text_bytes / 4 && slots < kMaxSlots) slots <<= 1;
    slots_.assign(slots, Slot{});
    mask_ = slots - 1;
    keys_.clear();
    lookups_ = hits_ = skip_ = failed_windows_ = 0;
  }

  // Bytes of memory held (for the per-thread scratch bound).
  size_t capacity_bytes() const { return slots_.capacity() * sizeof(Slot) + keys_.capacity(); }

  // Whether the next word should be looked up at all. Text whose words
  // never repeat (random Unicode: every lookup a miss, a cache miss each,
  // and a copy of every word into the memo) skips the memo for a while
  // when the last kWindow lookups found less than one in kMinHitShare,
  // then tries again; real text keeps it. Each window in a row that fails
  // doubles the skip (up to kMaxSkipDoublings times): with a fixed skip,
  // random text still looked up one word in five. Skipping only costs
  // encoding words again, so ids are unchanged.
  bool worth_consulting() {
    if (skip_ > 0) {
      --skip_;
      return false;
    }
    return true;
  }
  // Records the outcome of a lookup made after worth_consulting().
  void record(bool hit) {
    hits_ += hit ? 1 : 0;
    if (++lookups_ < kWindow) return;
    if (hits_ * kMinHitShare < lookups_) {
      skip_ = kSkip << failed_windows_;
      failed_windows_ = std::min(failed_windows_ + 1, kMaxSkipDoublings);
    } else {
      failed_windows_ = 0;
    }
    lookups_ = hits_ = 0;
  }

  // When `word` is remembered, appends its ids to `out` and returns true.
  // `hash` receives the word's hash, for a store() of the same word.
  bool append_if_known(std::string_view word, std::vector<int32_t>& out, uint64_t& hash) const {
    if (word.size() > kMaxWordBytes) return false;
    const uint64_t h = hash = hash_bytes(word.data(), word.size());
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    const uint64_t short_key = word.size() <= kInlineKeyBytes ? pack(word) : 0;
    for (size_t k = 0, i = h & mask_; k < kProbes; ++k, i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.length == kEmpty) return false;
      if (s.tag != tag || s.length != word.size()) continue;
      if (word.size() <= kInlineKeyBytes) {
        if (s.key != short_key) continue;
      } else if (std::string_view(keys_.data() + s.key, s.length) != word) {
        continue;
      }
      if (s.count <= kInlineIds) {
        out.insert(out.end(), s.ids, s.ids + s.count);
      } else {
        append_earlier(out, s.first, s.count);
      }
      return true;
    }
    return false;
  }

  // Remembers that `word` was encoded to out[first, out.size()). `hash`:
  // what append_if_known() gave for this word.
  void store(std::string_view word, uint64_t hash, const std::vector<int32_t>& out, size_t first) {
    if (word.size() > kMaxWordBytes) return;
    const size_t count = out.size() - first;
    if (count > UINT16_MAX) return;
    const uint64_t h = hash;
    size_t target = h & mask_;
    for (size_t k = 0, i = target; k < kProbes; ++k, i = (i + 1) & mask_) {
      if (slots_[i].length == kEmpty) {
        target = i;
        break;
      }
    }
    Slot s;
    s.tag = static_cast<uint32_t>(h >> 32);
    s.length = static_cast<uint16_t>(word.size());
    s.count = static_cast<uint16_t>(count);
    if (word.size() <= kInlineKeyBytes) {
      s.key = pack(word);
    } else {
      if (keys_.size() + word.size() > kMaxKeyBytes) {
        // The arena keeps the keys of replaced slots too: past its cap the
        // memo starts over rather than grow with the text.
        std::fill(slots_.begin(), slots_.end(), Slot{});
        keys_.clear();
        target = h & mask_;
      }
      s.key = keys_.size();
      keys_.append(word.data(), word.size());
    }
    if (count <= kInlineIds) {
      std::copy(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), s.ids);
    } else {
      s.first = first;
    }
    slots_[target] = s;
  }

 private:
  static constexpr size_t kMaxSlots = size_t{1} << 14;
  static constexpr size_t kProbes = 4;
  static constexpr size_t kMaxKeyBytes = size_t{1} << 20;
  static constexpr size_t kInlineKeyBytes = 8;
  static constexpr size_t kInlineIds = 4;
  static constexpr uint16_t kEmpty = UINT16_MAX;

  struct Slot {
    uint32_t tag = 0;           // high half of the word's hash
    uint16_t length = kEmpty;   // word bytes; kEmpty: free slot
    uint16_t count = 0;         // ids
    uint64_t key = 0;           // the word itself (<= 8 bytes), else its offset in keys_
    union {
      int32_t ids[kInlineIds];  // count <= kInlineIds
      uint64_t first;           // else: its ids are out[first, first + count)
    };
    Slot() : ids{} {}
  };
  static_assert(sizeof(Slot) == 32, "a slot is half a cache line");

  // A word of at most 8 bytes as one integer (zero-padded; lengths are
  // compared separately, so padding cannot make two words equal).
  static uint64_t pack(std::string_view word) {
    uint64_t v = 0;
    std::memcpy(&v, word.data(), word.size());
    return v;
  }

  // Appends out[first, first + count), keeping the vector's geometric
  // growth (an exact-size reserve on each hit reallocated and copied every
  // id so far, which made "7" * n quadratic).
  static void append_earlier(std::vector<int32_t>& out, size_t first, size_t count) {
    const size_t needed = out.size() + count;
    if (needed > out.capacity()) out.reserve(std::max(needed, 2 * out.capacity()));
    // No reallocation below (capacity suffices), so the source stays valid.
    for (size_t k = 0; k < count; ++k) out.push_back(out[first + k]);
  }

  static constexpr uint32_t kWindow = 4096;
  static constexpr uint32_t kMinHitShare = 16;
  static constexpr uint32_t kSkip = 4 * kWindow;
  static constexpr uint32_t kMaxSkipDoublings = 4;

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  std::string keys_;
  uint32_t lookups_ = 0, hits_ = 0, skip_ = 0, failed_windows_ = 0;
};

}  // namespace muser
