#include "tokenizer/unicode_text.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

namespace muser::unicode {
namespace {

struct ClassRange {
  uint32_t first;
  UnicodeClass cls;
};

constexpr ClassRange kClassRanges[] = {
#include "tokenizer/unicode_categories.inc"
};

constexpr uint32_t kTableSize = kMaxCodePoint + 1;

// The collapsed class byte of every code point, as a two-level table:
// blocks of 256 code points, identical blocks stored once (146 distinct of
// 4,352: 37 KB). Built once on first use (function-local static: thread-safe
// initialisation, immutable afterwards). A flat 1.1 MB table made random
// Unicode miss the caches on nearly every code point; the distinct blocks
// fit in L2, and the unassigned and private-use planes share one block each.
struct CollapsedTable {
  static constexpr uint32_t kBlockBits = 8;
  std::vector<uint16_t> block_of;  // per block of code points, its index in `bytes`
  std::vector<uint8_t> bytes;      // the distinct blocks, 256 bytes each

  uint8_t operator[](uint32_t cp) const {
    return bytes[(static_cast<size_t>(block_of[cp >> kBlockBits]) << kBlockBits) | (cp & 0xFF)];
  }
};

const CollapsedTable& collapsed_table() {
  static const CollapsedTable table = [] {
    std::vector<uint8_t> t(kTableSize);
    constexpr size_t n_ranges = sizeof(kClassRanges) / sizeof(kClassRanges[0]);
    for (size_t i = 0; i < n_ranges; ++i) {
      const uint32_t begin = kClassRanges[i].first;
      const uint32_t end = i + 1 < n_ranges ? kClassRanges[i + 1].first : kTableSize;
      uint8_t byte = kCollapsedOther;
      switch (kClassRanges[i].cls) {
        case UnicodeClass::Number: byte = kCollapsedNumber; break;
        case UnicodeClass::Letter: byte = kCollapsedLetter; break;
        case UnicodeClass::Punctuation: byte = kCollapsedPunctuation; break;
        case UnicodeClass::Mark: byte = kCollapsedMark; break;
        case UnicodeClass::Symbol: byte = kCollapsedSymbol; break;
        default: byte = kCollapsedOther; break;
      }
      std::fill(t.begin() + begin, t.begin() + end, byte);
    }
    for (uint32_t cp = 0; cp < 0x80; ++cp) t[cp] = static_cast<uint8_t>(cp);
    for (uint32_t cp : {0x85u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
      t[cp] = kCollapsedWhitespace;
    }
    for (uint32_t cp = 0x2000; cp <= 0x200A; ++cp) t[cp] = kCollapsedWhitespace;

    CollapsedTable out;
    constexpr uint32_t block = 1u << CollapsedTable::kBlockBits;
    static_assert(kTableSize % block == 0, "the table is whole blocks");
    std::map<std::string_view, uint16_t> seen;  // block content (in `t`) -> index
    out.block_of.resize(kTableSize / block);
    for (uint32_t b = 0; b < kTableSize / block; ++b) {
      const std::string_view content(reinterpret_cast<const char*>(t.data()) + size_t{b} * block, block);
      const auto [it, added] = seen.emplace(content, static_cast<uint16_t>(seen.size()));
      if (added) out.bytes.insert(out.bytes.end(), content.begin(), content.end());
      out.block_of[b] = it->second;
    }
    return out;
  }();
  return table;
}

}  // namespace

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) out.push_back(decode_one(text, offset));
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > kMaxCodePoint) cp = kReplacementChar;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

UnicodeClass class_of(uint32_t cp) {
  if (cp > kMaxCodePoint) return UnicodeClass::Undefined;
  const auto it = std::upper_bound(std::begin(kClassRanges), std::end(kClassRanges), cp,
                                   [](uint32_t v, const ClassRange& r) { return v < r.first; });
  return (it - 1)->cls;
}

bool is_whitespace(uint32_t cp) {
  if (cp < 0x80) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  return cp <= kMaxCodePoint && collapsed_table()[cp] == kCollapsedWhitespace;
}

uint8_t collapsed_byte(uint32_t cp) {
  return cp <= kMaxCodePoint ? collapsed_table()[cp] : kCollapsedOther;
}

void collapse(const uint32_t* code_points, size_t n, uint32_t* symbols) {
  const CollapsedTable& table = collapsed_table();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t cp = code_points[i];
    symbols[i] = cp < 0x80 ? cp : cp <= kMaxCodePoint ? table[cp] : kCollapsedOther;
  }
}

}  // namespace muser::unicode
