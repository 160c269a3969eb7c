#include "lockstep/log/crc32c.h"

#include <array>

namespace lockstep::log {
namespace {

constexpr std::uint32_t kCastagnoliReflected = 0x82F63B78U;

// table[b]: the CRC register after shifting byte b through it, eight bits at a time.
constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t byte = 0; byte < 256; ++byte) {
    std::uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1U) ? kCastagnoliReflected : 0U);
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> kCrc32cTable = make_crc32c_table();

}  // namespace

std::uint32_t crc32c(std::string_view data) {
  std::uint32_t crc = 0xFFFFFFFFU;
  for (const char c : data) crc = (crc >> 8) ^ kCrc32cTable[(crc ^ static_cast<unsigned char>(c)) & 0xFFU];
  return crc ^ 0xFFFFFFFFU;
}

std::uint32_t mask_crc32c(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8U;
}

std::uint32_t masked_crc32c(std::string_view data) {
  return mask_crc32c(crc32c(data));
}

}  // namespace lockstep::log
