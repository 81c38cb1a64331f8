#include "tokenizer/token_maps.h"

#include <cstring>

namespace muser {


void TokenTextMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  count_ = 0;
  filter_.assign(cap / 8, 0);  // 16 bits a key at the table's full load (cap / 2 keys)
  filter_mask_ = filter_.size() - 1;
  for (const Slot& s : old) {
    if (s.id >= 0) insert(s.offset, s.size, s.id);
  }
}

void TokenTextMap::grow() { reserve(slots_.empty() ? 8 : slots_.size()); }

int32_t TokenTextMap::insert(uint32_t offset, uint32_t size, int32_t id) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const char* key = arena_ + offset;
  const uint64_t h = hash_bytes(key, size);
  const uint32_t h32 = static_cast<uint32_t>(h >> 32);
  for (size_t i = static_cast<size_t>(h) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.id < 0) {
      s = Slot{offset, size, h32, id};
      filter_[filter_word(h)] |= filter_bits(h);
      ++count_;
      return -1;
    }
    if (s.hash32 == h32 && s.size == size && std::memcmp(arena_ + s.offset, key, size) == 0) return s.id;
  }
}

int32_t TokenTextMap::find(const char* data, size_t size) const {
  if (slots_.empty()) return -1;
  const uint64_t h = hash_bytes(data, size);
  const uint64_t bits = filter_bits(h);
  if ((filter_[filter_word(h)] & bits) != bits) return -1;
  const uint32_t h32 = static_cast<uint32_t>(h >> 32);
  for (size_t i = static_cast<size_t>(h) & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.id < 0) return -1;
    if (s.hash32 == h32 && s.size == size && std::memcmp(arena_ + s.offset, data, size) == 0) return s.id;
  }
}

void MergeMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  count_ = 0;
  for (const Slot& s : old) {
    if (s.merge.rank >= 0) {
      insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu), s.merge);
    }
  }
}

void MergeMap::grow() { reserve(slots_.empty() ? 8 : slots_.size()); }

void MergeMap::insert(int32_t left, int32_t right, Merge merge) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = key_of(left, right);
  for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.merge.rank < 0) {
      s = Slot{key, merge};
      ++count_;
      return;
    }
    if (s.key == key) return;
  }
}

}  // namespace muser
