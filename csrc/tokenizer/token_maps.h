// Open-addressing hash maps for the tokenizer's hot lookups: token text -> id
// and (left id, right id) -> BPE merge. Built once, then read-only (safe to
// share across threads). Faster and smaller than std::unordered_map for
// hundreds of thousands of short keys.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace muser {

// 64-bit hash of a byte string (FNV-1a over 8-byte words, then mixed).
// Inline: the word memo hashes every word of a text.
inline uint64_t hash_bytes(const char* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ULL ^ (size * 0x9E3779B97F4A7C15ULL);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  for (size_t k = 0; i < size; ++i, ++k) tail |= static_cast<uint64_t>(static_cast<uint8_t>(data[i])) << (8 * k);
  h = (h ^ tail) * 0x100000001b3ULL;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ULL;
  h ^= h >> 32;
  return h;
}

// Maps token text to id. Keys live in one arena the owner keeps alive and
// unmoved (the Tokenizer's text arena); slots store offsets into it, which
// keeps a slot at 16 bytes (fewer cache misses on large vocabularies).
class TokenTextMap {
 public:
  // Must be called before inserting; `arena` must outlive the map.
  void set_arena(const char* arena) { arena_ = arena; }
  // Inserts arena[offset, offset + size); returns the id already stored under
  // that text, or -1 if new.
  int32_t insert(uint32_t offset, uint32_t size, int32_t id);
  int32_t find(std::string_view key) const { return find(key.data(), key.size()); }
  int32_t find(const char* data, size_t size) const;
  void reserve(size_t n);
  size_t size() const { return count_; }

 private:
  struct Slot {
    uint32_t offset = 0;
    uint32_t size = 0;
    uint32_t hash32 = 0;
    int32_t id = -1;  // -1: empty
  };
  void grow();
  // Blocked Bloom filter over the keys (two bits in one 64-bit word, 16
  // bits a key): most texts looked up while merging are not tokens (random
  // pairs of characters), and on a large vocabulary the table is megabytes,
  // so each such miss would cost a trip to memory; the filter answers most
  // of them from cache. A set bit proves nothing; the table decides.
  static uint64_t filter_bits(uint64_t h) { return (uint64_t{1} << ((h >> 6) & 63)) | (uint64_t{1} << ((h >> 12) & 63)); }
  size_t filter_word(uint64_t h) const { return static_cast<size_t>(h >> 32) & filter_mask_; }
  const char* arena_ = nullptr;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
  std::vector<uint64_t> filter_;
  size_t filter_mask_ = 0;
};

// Maps an adjacent pair of token ids to its merge: rank (lower merges first)
// and the id of the merged token.
class MergeMap {
 public:
  struct Merge {
    int32_t rank = -1;
    int32_t result = -1;
  };
  // Keeps the first (lowest-rank) entry for a pair, as llama.cpp does.
  void insert(int32_t left, int32_t right, Merge merge);
  // Inline: the BPE merge loop asks for every new pair.
  Merge find(int32_t left, int32_t right) const {
    if (slots_.empty()) return {};
    const uint64_t key = key_of(left, right);
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.merge.rank < 0) return {};
      if (s.key == key) return s.merge;
    }
  }
  void reserve(size_t n);
  size_t size() const { return count_; }

 private:
  struct Slot {
    uint64_t key = 0;
    Merge merge;  // rank -1: empty
  };
  static uint64_t key_of(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  static size_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  void grow();
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
};

}  // namespace muser
