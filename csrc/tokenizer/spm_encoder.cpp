// SentencePiece-style encoding (tokenizer.ggml.model == "llama").
//
// The text (spaces already written as U+2581) starts as one symbol per UTF-8
// character; the adjacent pair whose concatenation is the highest-scoring
// token is merged, repeatedly (ties: leftmost pair first), until no pair
// forms a token. Symbols that are not tokens fall back to <0xXX> byte tokens.
// This is llama.cpp's llm_tokenizer_spm, including its character split by
// lead byte only (continuation bytes are not validated).
#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace muser {
namespace {

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

// Highest score first; among equal scores the leftmost pair.
struct SpmBigramOrder {
  bool operator()(const SpmBigram& a, const SpmBigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void Tokenizer::spm_byte_fallback(const char* bytes, size_t n, std::vector<int32_t>& out) const {
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = byte_token_[static_cast<uint8_t>(bytes[i])];
    // llama.cpp throws when a vocabulary has no token for a byte; we emit
    // the unknown token instead (or nothing when there is none either).
    if (id >= 0) {
      out.push_back(id);
    } else if (unk_ >= 0) {
      out.push_back(unk_);
    }
  }
}

void Tokenizer::encode_spm(std::string_view raw, std::vector<int32_t>& out) const {
  std::string text;
  text.reserve(raw.size() + raw.size() / 4);
  for (char c : raw) {
    if (c == ' ') {
      text += "\xE2\x96\x81";
    } else {
      text.push_back(c);
    }
  }
  if (text.empty()) return;

  std::vector<SpmSymbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = std::min(unicode::utf8_sequence_length(static_cast<uint8_t>(text[offset])), text.size() - offset);
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(SpmSymbol{static_cast<uint32_t>(offset), static_cast<uint32_t>(len), index - 1,
                                offset + len == text.size() ? -1 : index + 1,
                                text_to_id_.find(text.data() + offset, len)});
    offset += len;
  }

  std::vector<SpmBigram> heap;  // max-heap under SpmBigramOrder
  heap.reserve(symbols.size());
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    if (length > max_token_length_) return;
    const int32_t id = text_to_id_.find(text.data() + symbols[left].start, length);
    if (id < 0) return;
    heap.push_back(SpmBigram{scores_[id], left, right, length, id});
    std::push_heap(heap.begin(), heap.end(), SpmBigramOrder{});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), SpmBigramOrder{});
    const SpmBigram bigram = heap.back();
    heap.pop_back();
    SpmSymbol& left = symbols[bigram.left];
    SpmSymbol& right = symbols[bigram.right];
    // Stale: one side was merged away or grew since this pair was queued.
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) continue;
    left.length += right.length;
    left.id = bigram.id;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const SpmSymbol& s = symbols[i];
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      spm_byte_fallback(text.data() + s.start, s.length, out);
    }
  }
}

}  // namespace muser
