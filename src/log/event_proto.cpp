#include "lockstep/log/event_proto.h"

#include <cstring>

namespace lockstep::log {
namespace {

// Wire types (event_proto.h).
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

void put_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80U) {
    out.push_back(static_cast<char>((value & 0x7FU) | 0x80U));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire_type));
}

void put_fixed(std::string& out, std::uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFFU));
}

void put_double(std::string& out, int field, double value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_key(out, field, kFixed64);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, int field, float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_key(out, field, kFixed32);
  put_fixed(out, bits, 4);
}

void put_int64(std::string& out, int field, std::int64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<std::uint64_t>(value));  // two's complement: negatives take 10 bytes
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Field numbers.
constexpr int kFieldEventWallTime = 1;
constexpr int kFieldEventStep = 2;
constexpr int kFieldEventFileVersion = 3;
constexpr int kFieldEventSummary = 5;
constexpr int kFieldSummaryValue = 1;
constexpr int kFieldValueTag = 1;
constexpr int kFieldValueSimpleValue = 2;

}  // namespace

std::string encode_file_version_event(double wall_time) {
  std::string event;
  put_double(event, kFieldEventWallTime, wall_time);
  put_bytes(event, kFieldEventFileVersion, kEventFileVersion);
  return event;
}

std::string encode_scalar_event(const std::string& tag, float value, std::int64_t step, double wall_time) {
  std::string value_message;
  put_bytes(value_message, kFieldValueTag, tag);
  put_float(value_message, kFieldValueSimpleValue, value);
  std::string summary;
  put_bytes(summary, kFieldSummaryValue, value_message);
  std::string event;
  put_double(event, kFieldEventWallTime, wall_time);
  put_int64(event, kFieldEventStep, step);
  put_bytes(event, kFieldEventSummary, summary);
  return event;
}

}  // namespace lockstep::log
