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
uint32_t decode_one(std::string_view text, size_t& offset);

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
