// Byte-level BPE encoding (tokenizer.ggml.model == "gpt2").
//
// The pre-tokenizer splits the text into words; each word starts as one
// symbol per byte (the token of that byte's GPT-2 alphabet character) and the
// adjacent pair with the lowest merge rank is merged, repeatedly (ties:
// leftmost pair first), until no pair has a merge. This is llama.cpp's
// llm_tokenizer_bpe, on token ids instead of strings: every merge names known
// tokens (checked at load), so ids and texts correspond one to one.
#include <algorithm>
#include <cstring>
#include <memory>

#include "tokenizer/byte_level.h"
#include "tokenizer/byte_runs.h"
#include "tokenizer/merge_queue.h"
#include "tokenizer/thread_scratch.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/word_memo.h"

namespace muser {

// Symbol i starts at byte i of its word (a merge keeps the left symbol).
struct Tokenizer::BpeSymbol {
  uint32_t length;  // bytes; 0 once merged into the symbol on its left
  int32_t prev;
  int32_t next;
  int32_t id;  // -1 when the byte's character is not a token
};

struct Tokenizer::BpeBigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t result;
};

namespace {

using BpeBigram = Tokenizer::BpeBigram;

// Lowest rank first; among equal ranks the leftmost pair (heap order: the
// "largest" is popped first, hence the inverted comparison).
struct BpeBigramOrder {
  bool operator()(const BpeBigram& a, const BpeBigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

using BpeSymbol = Tokenizer::BpeSymbol;

// The merge loop over a word's symbols (linked by prev/next), with either
// queue: both pop candidates in (rank, left) order, so the merges and the
// tokens are the same.
//
// `bytes` are the word's bytes (one per initial symbol); `byte_pairs` is the
// bitmap of byte pairs whose characters' tokens have a merge and
// `byte_pair_merge` that merge: the initial pairs are looked up there (the
// bitmap fits in L1, the table in L2), never in the merge map, whose
// lookups on random text went to memory.
template <typename Queue>
void merge_bpe_symbols(std::vector<BpeSymbol>& symbols, int32_t count, const uint8_t* bytes,
                       const std::vector<uint64_t>& byte_pairs, const MergeMap::Merge* byte_pair_merge,
                       const MergeMap& merges, Queue&& queue, EncodeControl& control) {
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t left_id = symbols[left].id;
    const int32_t right_id = symbols[right].id;
    if (left_id < 0 || right_id < 0) return;
    const MergeMap::Merge m = merges.find(left_id, right_id);
    if (m.rank < 0) return;
    queue.push(static_cast<uint32_t>(m.rank), BpeBigram{m.rank, left, right, left_id, right_id, m.result});
  };
  for (int32_t i = 1; i < count; ++i) {
    const uint32_t pair = (uint32_t{bytes[i - 1]} << 8) | bytes[i];
    if (((byte_pairs[pair >> 6] >> (pair & 63)) & 1) == 0) continue;
    const MergeMap::Merge m = byte_pair_merge[pair];
    queue.push(static_cast<uint32_t>(m.rank),
               BpeBigram{m.rank, i - 1, i, symbols[i - 1].id, symbols[i].id, m.result});
  }

  BpeBigram bigram;
  while (queue.pop(bigram)) {
    control.work(1);
    BpeSymbol& left = symbols[bigram.left];
    BpeSymbol& right = symbols[bigram.right];
    // Stale: a side was merged away or changed since the pair was queued.
    if (left.length == 0 || right.length == 0 || left.id != bigram.left_id || right.id != bigram.right_id) continue;
    left.length += right.length;
    left.id = bigram.result;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }
}

}  // namespace

// A BPE encode call's work buffers, kept by its thread between calls
// (thread_scratch.h); every user clears what it uses first.
struct Tokenizer::BpeScratch {
  pretok::PreTokenizerScratch pre;
  std::string clean;  // the clean text when it is not the text itself
  std::vector<std::pair<uint32_t, uint32_t>> words;
  std::vector<BpeSymbol> symbols;
  std::vector<BpeBigram> heap;  // max-heap under BpeBigramOrder
  MergeQueue<BpeBigram> queue;  // long words (see merge_queue.h)
  std::string encoded;
  std::vector<RunBlock> run_blocks, run_next;  // the run shortcut's encodings
  WordMemo memo;

  size_t capacity_bytes() const {
    return pre.capacity_bytes() + clean.capacity() + words.capacity() * sizeof(words[0]) +
           symbols.capacity() * sizeof(BpeSymbol) + heap.capacity() * sizeof(BpeBigram) + queue.capacity_bytes() +
           encoded.capacity() + (run_blocks.capacity() + run_next.capacity()) * sizeof(RunBlock) +
           memo.capacity_bytes();
  }
};

namespace {
thread_local std::unique_ptr<Tokenizer::BpeScratch> kept_bpe_scratch;
}  // namespace

size_t Tokenizer::kept_scratch_bytes() { return kept_bpe_scratch ? kept_bpe_scratch->capacity_bytes() : 0; }

void Tokenizer::encode_bpe_fragments(std::string_view text, const std::vector<TextFragment>& fragments,
                                     std::vector<int32_t>& out, EncodeControl& control) const {
  const ScratchLease<BpeScratch> scratch(kept_bpe_scratch, kKeptScratchBytes);
  // Word bytes -> where its ids already are in `out`, across the fragments:
  // real text repeats words constantly, and a word's ids depend on nothing else.
  scratch->memo.reset(text.size());
  for (const TextFragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
    } else {
      encode_bpe(text.substr(f.offset, f.length), out, *scratch, scratch->memo, control);
    }
  }
}

void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out, BpeScratch& scratch, WordMemo& memo,
                           EncodeControl& control) const {
  std::string_view clean;
  pre_tokenizer_->split(text, scratch.clean, clean, scratch.words, scratch.pre, control);
  for (const auto& [word_begin, word_end] : scratch.words) {
    const uint32_t word_length = word_end - word_begin;
    if (word_length == 0) continue;
    control.work(word_length);
    const std::string_view word(clean.data() + word_begin, word_length);
    if (!memo.worth_consulting()) {
      encode_bpe_word(clean, word_begin, word_end, out, scratch, control);
      continue;
    }
    uint64_t hash = 0;
    const bool hit = memo.append_if_known(word, out, hash);
    memo.record(hit);
    if (hit) continue;
    const size_t out_before = out.size();
    encode_bpe_word(clean, word_begin, word_end, out, scratch, control);
    memo.store(word, hash, out, out_before);
  }
}

void Tokenizer::encode_bpe_word(std::string_view clean, uint32_t word_begin, uint32_t word_end,
                                std::vector<int32_t>& out, BpeScratch& scratch, EncodeControl& control) const {
  const uint32_t word_length = word_end - word_begin;
  std::string& encoded = scratch.encoded;
  std::vector<BpeSymbol>& symbols = scratch.symbols;
  if (ignore_merges_) {
    // Words that are tokens as a whole skip merging (llama3-style vocabularies).
    encoded.clear();
    for (uint32_t i = word_begin; i < word_end; ++i) encoded += byte_level::utf8_of_byte(static_cast<uint8_t>(clean[i]));
    const int32_t id = text_to_id_.find(encoded);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  // A run of one byte (memcmp of the word with itself shifted by one: every
  // byte equals the next) merges on its run-length encoding, when the
  // byte's merges allow it (byte_runs.h).
  const uint8_t* const bytes = reinterpret_cast<const uint8_t*>(clean.data()) + word_begin;
  const ByteRunMerges& runs = byte_runs_[bytes[0]];
  // (Most words differ at their second byte; that check is inline.)
  if (runs.level_ordered && (word_length == 1 || bytes[1] == bytes[0]) &&
      control.use_byte_runs(word_length, runs.merges.size()) && std::memcmp(bytes, bytes + 1, word_length - 1) == 0 &&
      merge_byte_run(runs, word_length, out, scratch.run_blocks, scratch.run_next)) {
    return;
  }
  // Filled in place, field by field: push_back of a temporary made the
  // compiler build each symbol on the stack and copy it with overlapping
  // loads and stores, a store-forwarding stall per byte of every word.
  // Only the first word_length entries are used; the vector never shrinks,
  // so a word costs no resize call (every field is written below).
  if (symbols.size() < word_length) symbols.resize(word_length);
  BpeSymbol* const symbol = symbols.data();
  for (uint32_t i = 0; i < word_length; ++i) {
    const int32_t index = static_cast<int32_t>(i);
    symbol[i].length = 1;
    symbol[i].prev = index - 1;
    symbol[i].next = index + 1;
    symbol[i].id = byte_char_token_[static_cast<uint8_t>(clean[word_begin + i])];
  }
  symbol[word_length - 1].next = -1;
  if (control.use_buckets(word_length)) {
    scratch.queue.clear();
    merge_bpe_symbols(symbols, static_cast<int32_t>(word_length), bytes, byte_pair_merges_,
                      byte_pair_merge_.data(), merges_, scratch.queue,
                      control);
  } else {
    scratch.heap.clear();
    merge_bpe_symbols(symbols, static_cast<int32_t>(word_length), bytes, byte_pair_merges_,
                      byte_pair_merge_.data(), merges_,
                      HeapMergeQueue<BpeBigram, BpeBigramOrder>{scratch.heap}, control);
  }

  // The live symbols are 0, then each one's start plus its length (a
  // merge keeps the left symbol's start).
  for (uint32_t i = 0; i < word_length; i += symbol[i].length) {
    const int32_t id = symbol[i].id;
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // A character with no token (such a symbol never merged: one byte):
    // llama.cpp tries each byte of its UTF-8 as a one-byte token and drops
    // the bytes that are not tokens (byte_char_fallback_ holds the ids).
    const ByteFallback& fallback = byte_char_fallback_[bytes[i]];
    out.insert(out.end(), fallback.ids, fallback.ids + fallback.count);
  }
}

}  // namespace muser
