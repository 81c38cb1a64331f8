// UTF-8 and Unicode-class helpers for the tokenizer.
//
// Decoding follows llama.cpp's lenient rules, because token ids depend on
// them: a byte that does not start a well-formed sequence becomes U+FFFD and
// only that one byte is consumed. Overlong forms and surrogates are not
// rejected (llama.cpp does not reject them either).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace muser::unicode {

// General-category class of a code point (one per code point). The order is
// the code used in unicode_categories.inc.
enum class UnicodeClass : uint8_t {
  Undefined, Number, Letter, Separator, Mark, Punctuation, Symbol, Control,
};

constexpr uint32_t kReplacementChar = 0xFFFD;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Length in bytes of the sequence that `lead` starts, judged by its high bits
// only (1 for continuation bytes and ASCII). SentencePiece symbol splitting
// uses exactly this rule, without validating the continuation bytes.
inline size_t utf8_sequence_length(uint8_t lead) {
  static constexpr uint8_t kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLength[lead >> 4];
}

// Decodes one code point at `offset` and advances it (always by >= 1).
// Inline: the pre-tokenizer calls it once per character.
inline uint32_t decode_one(std::string_view text, size_t& offset) {
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


// decode_one for a sequence with 4 readable bytes at `p`, without a branch
// on its length (random text mispredicted one per character): the length
// comes from a table on the lead byte's top 5 bits, the continuation bytes
// are checked with one mask, and the code point is assembled as if 4 bytes
// long, then shifted down. Returns 0 (the caller then uses decode_one)
// when the lead byte cannot start a sequence or a continuation byte is
// wrong; else the sequence's length, with `cp` exactly what decode_one
// gives for it (overlong forms and surrogates included; past U+10FFFF,
// U+FFFD).
inline uint32_t decode_four_readable(const unsigned char* p, uint32_t& cp) {
  static constexpr uint8_t kLength[32] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                          0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 3, 3, 4, 0};
  static constexpr uint32_t kContinuationMask[5] = {0, 0, 0xC000, 0xC0C000, 0xC0C0C000};
  static constexpr uint32_t kContinuationBits[5] = {0, 0, 0x8000, 0x808000, 0x80808000};
  static constexpr uint32_t kLeadMask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  const uint32_t length = kLength[p[0] >> 3];
  const uint32_t word = uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
  if (length == 0 || (word & kContinuationMask[length]) != kContinuationBits[length]) return 0;
  const uint32_t all = ((p[0] & kLeadMask[length]) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
                       (p[3] & 0x3Fu);
  const uint32_t value = all >> (6 * (4 - length));
  cp = value <= kMaxCodePoint ? value : kReplacementChar;
  return length;
}

// decode_one, faster on text with characters of mixed lengths: the same
// code point and advance for every input (tests compare them on random
// bytes: tests/property/test_utf8_decode.py).
inline uint32_t decode_one_fast(std::string_view text, size_t& offset) {
  uint32_t cp = 0;
  if (offset + 4 <= text.size()) {
    const uint32_t length = decode_four_readable(reinterpret_cast<const unsigned char*>(text.data()) + offset, cp);
    if (length != 0) {
      offset += length;
      return cp;
    }
  }
  return decode_one(text, offset);
}

// Decodes the whole text; invalid bytes become U+FFFD.
std::vector<uint32_t> decode_utf8(std::string_view text);

// Appends the UTF-8 encoding of `cp` (cp <= 0x10FFFF; larger values are
// encoded as U+FFFD).
void append_utf8(std::string& out, uint32_t cp);

UnicodeClass class_of(uint32_t cp);

// White_Space as llama.cpp defines it: U+0009..U+000D, U+0020, U+0085,
// U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
bool is_whitespace(uint32_t cp);

// The single "class byte" the pre-tokenizer regexes see for a code point:
// ASCII stays itself; any other code point becomes 0x0B when it is whitespace
// (so that \s matches it), else a byte naming its class: 0xD1 number,
// 0xD2 letter, 0xD3 punctuation, 0xD4 mark, 0xD5 symbol, 0xD0 anything else.
// This is llama.cpp's "collapsed text" representation; matching regexes on
// it reproduces llama.cpp's splits exactly.
uint8_t collapsed_byte(uint32_t cp);
// symbols[i] = code_points[i] for ASCII, else collapsed_byte(code_points[i]):
// the pre-tokenizer's collapsed view of a whole text in one call.
void collapse(const uint32_t* code_points, size_t n, uint32_t* symbols);

constexpr uint8_t kCollapsedWhitespace = 0x0B;
constexpr uint8_t kCollapsedOther = 0xD0;
constexpr uint8_t kCollapsedNumber = 0xD1;
constexpr uint8_t kCollapsedLetter = 0xD2;
constexpr uint8_t kCollapsedPunctuation = 0xD3;
constexpr uint8_t kCollapsedMark = 0xD4;
constexpr uint8_t kCollapsedSymbol = 0xD5;

}  // namespace muser::unicode
