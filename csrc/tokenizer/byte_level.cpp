#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/unicode_text.h"

namespace muser::byte_level {
namespace {

bool maps_to_itself(int byte) {
  return (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

struct Alphabet {
  std::array<uint32_t, 256> code_point{};
  std::array<std::string, 256> utf8;
  std::array<int16_t, 0x100 + 68> byte_of{};  // inverse of code_point; -1 when unused

  Alphabet() {
    byte_of.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      code_point[b] = maps_to_itself(b) ? static_cast<uint32_t>(b) : next++;
      unicode::append_utf8(utf8[b], code_point[b]);
      byte_of[code_point[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

uint32_t code_point_of_byte(uint8_t byte) { return alphabet().code_point[byte]; }

int byte_of_code_point(uint32_t cp) {
  const Alphabet& a = alphabet();
  return cp < a.byte_of.size() ? a.byte_of[cp] : -1;
}

const std::string& utf8_of_byte(uint8_t byte) { return alphabet().utf8[byte]; }

}  // namespace muser::byte_level
