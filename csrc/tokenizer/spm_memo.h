// Per-call memos and work buffers for SentencePiece encoding, shared by all
// fragments of one encode() call (see spm_encoder.cpp). Not shared between
// calls or threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/merge_queue.h"
#include "tokenizer/word_memo.h"

namespace muser {

// Work records of the SentencePiece merge loop.
struct SpmSymbol {
  uint32_t start;
  uint32_t length;  // 0 once merged into the symbol on its left
  int32_t prev;
  int32_t next;
  int32_t id;  // token id of the symbol's text, -1 when it is not a token
};

struct SpmBigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t length;
  int32_t id;
};

class SpmMemo {
 public:
  explicit SpmMemo(size_t text_size) : words(text_size) {
    size_t size = 1024;
    while (size < text_size && size < (1u << 14)) size <<= 1;
    pairs_.assign(size, PairEntry{});
    mask_ = size - 1;
  }

  // "Token a followed by token b forms token c" (c = -1: no token).
  // Direct-mapped: a collision just forgets the older pair.
  bool find_pair(int32_t a, int32_t b, int32_t& result) const {
    const PairEntry& e = pairs_[pair_index(a, b)];
    if (e.a != a || e.b != b) return false;
    result = e.result;
    return true;
  }
  void store_pair(int32_t a, int32_t b, int32_t result) { pairs_[pair_index(a, b)] = PairEntry{a, b, result}; }

  // Ids of words already encoded: [first, first + count) of the output.
  WordMemo words;

  // Buffers of the merge loop, reused word after word (no allocation per word).
  std::vector<SpmSymbol> symbols;
  std::vector<SpmBigram> heap;
  MergeQueue<SpmBigram> queue;

 private:
  struct PairEntry {
    int32_t a = -1;
    int32_t b = -1;
    int32_t result = -1;
  };
  size_t pair_index(int32_t a, int32_t b) const {
    uint64_t k = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    k *= 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>(k >> 40) & mask_;
  }
  std::vector<PairEntry> pairs_;
  size_t mask_ = 0;
};

}  // namespace muser
