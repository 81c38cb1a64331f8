// Word -> the ids it was already encoded to in this encode() call (a range
// of the output), for the BPE and SentencePiece encoders.
//
// Real text repeats a few thousand words over and over, so a bounded table
// keeps nearly every hit; text whose words are all distinct (random Unicode:
// hundreds of thousands of words in 1 MB) must not grow it past the cache, as
// a node-based map did (an allocation per word, and a miss on every lookup).
// So: open addressing over a fixed number of slots sized from the text (at
// most kMaxSlots), a lookup probes at most kProbes slots, and a word that
// finds them all taken replaces the first; forgetting a word costs only
// encoding it again. Keys are copied into one arena (no allocation per word)
// of at most 1 MiB; when it is full the memo starts over.
// Keys are not reserved up front: text whose words repeat stores few, and
// text whose words never repeat soon stops storing (worth_consulting()).
// Not thread-safe; one per encode call at a time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
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
    lookups_ = hits_ = skip_ = 0;
  }

  // Bytes of memory held (for the per-thread scratch bound).
  size_t capacity_bytes() const { return slots_.capacity() * sizeof(Slot) + keys_.capacity(); }

  // Whether the next word should be looked up at all. Text whose words
  // never repeat (random Unicode: every lookup a miss, a cache miss each,
  // and a copy of every word into the arena) skips the memo for a while
  // when the last kWindow lookups found less than one in kMinHitShare,
  // then tries again; real text keeps it. Skipping only costs encoding
  // words again, so ids are unchanged.
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
    if (hits_ * kMinHitShare < lookups_) skip_ = kSkip;
    lookups_ = hits_ = 0;
  }

  // The output range [first, first + count) that `word` was encoded to, or
  // false when it is not remembered.
  // `hash` receives the word's hash, for a store() of the same word.
  bool find(std::string_view word, size_t& first, size_t& count, uint64_t& hash) const {
    if (word.size() > kMaxWordBytes) return false;
    const uint64_t h = hash = hash_bytes(word.data(), word.size());
    for (size_t k = 0, i = h & mask_; k < kProbes; ++k, i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.length == kEmpty) return false;
      if (s.hash == h && s.length == word.size() && std::string_view(keys_.data() + s.key, s.length) == word) {
        first = s.first;
        count = s.count;
        return true;
      }
    }
    return false;
  }

  // `hash`: what find() gave for this word.
  void store(std::string_view word, uint64_t hash, size_t first, size_t count) {
    if (word.size() > kMaxWordBytes) return;
    const uint64_t h = hash;
    size_t target = h & mask_;
    for (size_t k = 0, i = target; k < kProbes; ++k, i = (i + 1) & mask_) {
      if (slots_[i].length == kEmpty) {
        target = i;
        break;
      }
    }
    if (keys_.size() + word.size() > kMaxKeyBytes) {
      // The arena keeps the keys of replaced slots too: past its cap the
      // memo starts over rather than grow with the text.
      std::fill(slots_.begin(), slots_.end(), Slot{});
      keys_.clear();
      target = h & mask_;
    }
    const size_t key = keys_.size();
    keys_.append(word.data(), word.size());
    slots_[target] = Slot{h, key, first, static_cast<uint32_t>(count), static_cast<uint32_t>(word.size())};
  }

 private:
  static constexpr size_t kMaxSlots = size_t{1} << 14;
  static constexpr size_t kProbes = 4;
  static constexpr size_t kMaxKeyBytes = size_t{1} << 20;
  static constexpr uint32_t kEmpty = UINT32_MAX;

  struct Slot {
    uint64_t hash = 0;
    size_t key = 0;    // offset of the word in keys_
    size_t first = 0;  // its ids in the output
    uint32_t count = 0;
    uint32_t length = kEmpty;
  };

  static constexpr uint32_t kWindow = 4096;
  static constexpr uint32_t kMinHitShare = 16;
  static constexpr uint32_t kSkip = 4 * kWindow;

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  std::string keys_;
  uint32_t lookups_ = 0, hits_ = 0, skip_ = 0;
};

}  // namespace muser
