#include "parse.h"

#include <lockstep/env/environment.h>

namespace lockstep::env::detail {
namespace {

constexpr std::size_t kMaxDigits = 18;  // 10^18 - 1 still fits in long long

bool all_digits(const std::string& value) {
  if (value.empty()) return false;
  for (char c : value) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::string range_text(long long lo, long long hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

std::string describe(const std::string& name, const std::string& value) {
  if (all_digits(value)) return name + "=" + value;
  return name + "='" + value + "'";
}

std::optional<long long> try_parse_digits(const std::string& value) {
  if (!all_digits(value) || value.size() > kMaxDigits) return std::nullopt;
  long long result = 0;
  for (char c : value) result = result * 10 + (c - '0');
  return result;
}

long long parse_integer(const std::string& name, const std::string& value, long long lo, long long hi) {
  if (auto parsed = try_parse_digits(value)) {
    if (*parsed >= lo && *parsed <= hi) return *parsed;
    throw EnvError(describe(name, value) + " is out of range " + range_text(lo, hi));
  }
  // A long digit string or a negative number is a well-formed integer outside the range.
  const bool negative = value.size() > 1 && value[0] == '-' && all_digits(value.substr(1));
  if (all_digits(value) || negative) {
    throw EnvError(describe(name, value) + " is out of range " + range_text(lo, hi));
  }
  throw EnvError(describe(name, value) + " is not an integer: " + name + " must be a decimal integer in " +
                 range_text(lo, hi));
}

int parse_int(const std::string& name, const std::string& value, int lo, int hi) {
  return static_cast<int>(parse_integer(name, value, lo, hi));
}

}  // namespace lockstep::env::detail
