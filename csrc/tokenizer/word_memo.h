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
// encoding it again. Keys are copied into one arena (no allocation per word).
// Not thread-safe; one per encode call.
#pragma once

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

  explicit WordMemo(size_t text_bytes) {
    size_t slots = 256;
    while (slots < text_bytes / 4 && slots < kMaxSlots) slots <<= 1;
    slots_.assign(slots, Slot{});
    mask_ = slots - 1;
  }

  // The output range [first, first + count) that `word` was encoded to, or
  // false when it is not remembered.
  bool find(std::string_view word, size_t& first, size_t& count) const {
    if (word.size() > kMaxWordBytes) return false;
    const uint64_t h = hash_bytes(word.data(), word.size());
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

  void store(std::string_view word, size_t first, size_t count) {
    if (word.size() > kMaxWordBytes) return;
    const uint64_t h = hash_bytes(word.data(), word.size());
    size_t target = h & mask_;
    for (size_t k = 0, i = target; k < kProbes; ++k, i = (i + 1) & mask_) {
      if (slots_[i].length == kEmpty) {
        target = i;
        break;
      }
    }
    const size_t key = keys_.size();
    keys_.append(word.data(), word.size());
    slots_[target] = Slot{h, key, first, static_cast<uint32_t>(count), static_cast<uint32_t>(word.size())};
  }

 private:
  static constexpr size_t kMaxSlots = size_t{1} << 14;
  static constexpr size_t kProbes = 4;
  static constexpr uint32_t kEmpty = UINT32_MAX;

  struct Slot {
    uint64_t hash = 0;
    size_t key = 0;    // offset of the word in keys_
    size_t first = 0;  // its ids in the output
    uint32_t count = 0;
    uint32_t length = kEmpty;
  };

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  std::string keys_;
};

}  // namespace muser
