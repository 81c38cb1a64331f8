// SentencePiece-style encoding (tokenizer.ggml.model == "llama").
//
// The text (spaces already written as U+2581) starts as one symbol per UTF-8
// character; the adjacent pair whose concatenation is the highest-scoring
// token is merged, repeatedly (ties: leftmost pair first), until no pair
// forms a token. Symbols that are not tokens fall back to <0xXX> byte tokens.
// This is llama.cpp's llm_tokenizer_spm, including its character split by
// lead byte only (continuation bytes are not validated).
//
// Speed without changing the result: a pair can only merge if some token
// contains it, so a position that no token can span splits the text into
// parts that merge independently (each part's merges happen in the same
// relative order as in the whole). Before every "▁" that follows another
// character is such a position, unless the vocabulary has tokens with an
// inner "▁" (e.g. ">▁</"); occurrences of those tokens' texts are not split.
// The parts ("words") repeat a lot, so each distinct word is merged once per
// call and its ids are reused.
#include <algorithm>
#include <cstring>

#include "tokenizer/spm_memo.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace muser {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Highest score first; among equal scores the leftmost pair (heap order).
struct SpmBigramOrder {
  bool operator()(const SpmBigram& a, const SpmBigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

bool is_space_at(std::string_view text, size_t pos) { return text.substr(pos, kSpace.size()) == kSpace; }

// MergeQueue priority of a score: higher scores pop first, equal scores
// (+0 and -0 too) share a priority. The float's bits made monotone, inverted.
uint32_t spm_priority(float score) {
  if (score == 0.0f) score = 0.0f;
  uint32_t bits = 0;
  std::memcpy(&bits, &score, sizeof bits);
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return ~ascending;
}

}  // namespace

bool Tokenizer::token_spans_space(std::string_view token) {
  for (size_t pos = token.find(kSpace, 1); pos != std::string_view::npos; pos = token.find(kSpace, pos + 1)) {
    if (pos < kSpace.size() || token.substr(pos - kSpace.size(), kSpace.size()) != kSpace) return true;
  }
  return false;
}

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

void Tokenizer::encode_spm(std::string_view raw, std::vector<int32_t>& out, SpmMemo& memo,
                           EncodeControl& control) const {
  std::string text;
  text.reserve(raw.size() + raw.size() / 4);
  for (char c : raw) {
    if (c == ' ') {
      text += kSpace;
    } else {
      text.push_back(c);
    }
  }
  if (text.empty()) return;

  if (!spm_word_split_) {
    encode_spm_part(text, 0, text.size(), out, memo, control);
    return;
  }
  // Byte ranges no split may fall inside: occurrences of tokens with an
  // inner space, sorted by start. Candidate positions only increase, so one
  // sweep tracks the furthest end among ranges that start before them.
  std::vector<std::pair<size_t, size_t>> keep_whole;
  for (int32_t id : spm_space_spanning_) {
    const std::string_view t = token_text(id);
    for (size_t p = text.find(t); p != std::string::npos; p = text.find(t, p + 1)) keep_whole.emplace_back(p, p + t.size());
  }
  std::sort(keep_whole.begin(), keep_whole.end());
  size_t next_range = 0, covered_until = 0;
  auto splittable = [&](size_t pos) {
    while (next_range < keep_whole.size() && keep_whole[next_range].first < pos) {
      covered_until = std::max(covered_until, keep_whole[next_range].second);
      ++next_range;
    }
    return pos >= covered_until;
  };

  size_t word_start = 0;
  bool previous_is_space = false;
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = std::min(unicode::utf8_sequence_length(static_cast<uint8_t>(text[offset])), text.size() - offset);
    const bool is_space = len == kSpace.size() && is_space_at(text, offset);
    if (is_space && offset > word_start && !previous_is_space && splittable(offset)) {
      encode_spm_word(text, word_start, offset, out, memo, control);
      word_start = offset;
    }
    previous_is_space = is_space;
    offset += len;
  }
  encode_spm_word(text, word_start, text.size(), out, memo, control);
}

void Tokenizer::encode_spm_word(const std::string& text, size_t begin, size_t end, std::vector<int32_t>& out,
                                SpmMemo& memo, EncodeControl& control) const {
  const std::string_view word(text.data() + begin, end - begin);
  control.work(word.size());
  uint64_t hash = 0;
  if (memo.words.append_if_known(word, out, hash)) return;
  const size_t before = out.size();
  encode_spm_part(text, begin, end, out, memo, control);
  memo.words.store(word, hash, out, before);
}

void Tokenizer::encode_spm_part(const std::string& text, size_t begin, size_t end, std::vector<int32_t>& out,
                                SpmMemo& memo, EncodeControl& control) const {
  std::vector<SpmSymbol>& symbols = memo.symbols;
  symbols.clear();
  symbols.reserve(end - begin);
  for (size_t offset = begin; offset < end;) {
    const uint8_t lead = static_cast<uint8_t>(text[offset]);
    const size_t len = std::min(unicode::utf8_sequence_length(lead), end - offset);
    const int32_t index = static_cast<int32_t>(symbols.size());
    const int32_t id = len == 1 ? single_byte_token_[lead] : text_to_id_.find(text.data() + offset, len);
    symbols.push_back(SpmSymbol{static_cast<uint32_t>(offset), static_cast<uint32_t>(len), index - 1,
                                offset + len == end ? -1 : index + 1, id});
    offset += len;
  }

  // NaN scores have no order (the heap's comparisons with them are what
  // llama.cpp does too); only the heap reproduces that.
  if (control.use_buckets(symbols.size()) && !spm_nan_scores_) {
    memo.queue.clear();
    merge_spm_symbols(text, memo.queue, memo, control);
  } else {
    memo.heap.clear();
    merge_spm_symbols(text, HeapMergeQueue<SpmBigram, SpmBigramOrder>{memo.heap}, memo, control);
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

template <typename Queue>
void Tokenizer::merge_spm_symbols(const std::string& text, Queue&& queue, SpmMemo& memo,
                                  EncodeControl& control) const {
  std::vector<SpmSymbol>& symbols = memo.symbols;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    if (length > max_token_length_) return;
    const int32_t a = symbols[left].id, b = symbols[right].id;
    int32_t id = -1;
    // A symbol's text is its token's text, so the pair's result is a
    // function of the two ids and can be remembered.
    if (a < 0 || b < 0) {
      id = text_to_id_.find(text.data() + symbols[left].start, length);
    } else if (!memo.find_pair(a, b, id)) {
      id = text_to_id_.find(text.data() + symbols[left].start, length);
      memo.store_pair(a, b, id);
    }
    if (id < 0) return;
    queue.push(spm_priority(scores_[id]), SpmBigram{scores_[id], left, right, length, id});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  SpmBigram bigram;
  while (queue.pop(bigram)) {
    control.work(1);
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
}

}  // namespace muser
