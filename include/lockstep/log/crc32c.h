#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lockstep::log {

/// CRC-32C (Castagnoli: polynomial 0x1EDC6F41, bit-reflected 0x82F63B78, initial value and final xor
/// 0xFFFFFFFF), the checksum of TFRecord files. Software, one 256-entry table built at compile time and one
/// byte a step: event files are small, speed does not matter here.
///
/// Example: crc32c("123456789") == 0xE3069283.
std::uint32_t crc32c(std::string_view data);

/// TFRecord's masked CRC of `crc`: ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32). TensorFlow masks
/// the CRCs it stores because a CRC of data that itself holds CRCs is weak; every TFRecord reader
/// (TensorBoard's included) expects the masked value.
std::uint32_t mask_crc32c(std::uint32_t crc);

/// mask_crc32c(crc32c(data)): what a TFRecord stores after the length and after the data.
std::uint32_t masked_crc32c(std::string_view data);

}  // namespace lockstep::log
