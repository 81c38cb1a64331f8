// GPT-2 byte-level alphabet: every byte 0..255 is written as one printable
// code point, so byte-level BPE vocabularies store arbitrary bytes as text.
// Printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to
// themselves; the remaining 68 bytes map, in increasing order, to U+0100,
// U+0101, ... (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ').
#pragma once

#include <cstdint>
#include <string>

namespace muser::byte_level {

// The code point that stands for `byte`.
uint32_t code_point_of_byte(uint8_t byte);

// The byte a code point stands for, or -1 when it is not in the alphabet.
int byte_of_code_point(uint32_t cp);

// UTF-8 of code_point_of_byte(byte) (2 bytes at most).
const std::string& utf8_of_byte(uint8_t byte);

}  // namespace muser::byte_level
