#include "crc32.h"

#include <array>
#include <cstring>

namespace robocache::io {

// The eight-byte step reads words in the host's order.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "crc32_update assumes a little-endian host");

namespace {

// Eight tables, so that the loop takes eight bytes a step ("slicing by 8").
using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) {
      c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    }
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (size_t s = 1; s < 8; ++s) {
      t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
  return t;
}

const Tables& tables() {
  static const Tables t = make_tables();
  return t;
}

}  // namespace

uint32_t crc32_update(uint32_t crc, const uint8_t* data, size_t bytes) {
  const Tables& t = tables();
  uint32_t c = ~crc;
  while (bytes >= 8) {
    uint32_t low, high;
    std::memcpy(&low, data, 4);
    std::memcpy(&high, data + 4, 4);
    low ^= c;
    c = t[7][low & 0xFF] ^ t[6][(low >> 8) & 0xFF] ^ t[5][(low >> 16) & 0xFF] ^ t[4][low >> 24] ^
        t[3][high & 0xFF] ^ t[2][(high >> 8) & 0xFF] ^ t[1][(high >> 16) & 0xFF] ^ t[0][high >> 24];
    data += 8;
    bytes -= 8;
  }
  while (bytes-- > 0) {
    c = (c >> 8) ^ t[0][(c ^ *data++) & 0xFF];
  }
  return ~c;
}

}  // namespace robocache::io
