#include "tokenizer/unicode_text.h"

#include <algorithm>
#include <array>
#include <memory>

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

// One byte per code point: the collapsed class byte. Built once on first use
// (function-local static: thread-safe initialisation, immutable afterwards).
// 1.1 MB, a few milliseconds to build; lookups are then a single load.
const uint8_t* collapsed_table() {
  static const std::unique_ptr<uint8_t[]> table = [] {
    std::unique_ptr<uint8_t[]> t(new uint8_t[kTableSize]);
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
      std::fill(t.get() + begin, t.get() + end, byte);
    }
    for (uint32_t cp = 0; cp < 0x80; ++cp) t[cp] = static_cast<uint8_t>(cp);
    for (uint32_t cp : {0x85u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
      t[cp] = kCollapsedWhitespace;
    }
    for (uint32_t cp = 0x2000; cp <= 0x200A; ++cp) t[cp] = kCollapsedWhitespace;
    return t;
  }();
  return table.get();
}

}  // namespace

uint32_t decode_one(std::string_view text, size_t& offset) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const size_t n = text.size();
  const uint8_t b0 = byte(offset);
  if (b0 < 0x80) {
    offset += 1;
    return b0;
  }
  const auto is_cont = [&](size_t i) { return i < n && (byte(i) & 0xC0) == 0x80; };
  if ((b0 & 0xE0) == 0xC0 && is_cont(offset + 1)) {
    const uint32_t cp = ((b0 & 0x1Fu) << 6) | (byte(offset + 1) & 0x3Fu);
    offset += 2;
    return cp;
  }
  if ((b0 & 0xF0) == 0xE0 && is_cont(offset + 1) && is_cont(offset + 2)) {
    const uint32_t cp =
        ((b0 & 0x0Fu) << 12) | ((byte(offset + 1) & 0x3Fu) << 6) | (byte(offset + 2) & 0x3Fu);
    offset += 3;
    return cp;
  }
  if ((b0 & 0xF8) == 0xF0 && is_cont(offset + 1) && is_cont(offset + 2) && is_cont(offset + 3)) {
    const uint32_t cp = ((b0 & 0x07u) << 18) | ((byte(offset + 1) & 0x3Fu) << 12) |
                        ((byte(offset + 2) & 0x3Fu) << 6) | (byte(offset + 3) & 0x3Fu);
    offset += 4;
    // Values past U+10FFFF make llama.cpp throw while re-encoding; we read
    // them as the replacement character instead of failing.
    return cp <= kMaxCodePoint ? cp : kReplacementChar;
  }
  offset += 1;
  return kReplacementChar;
}

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

}  // namespace muser::unicode
