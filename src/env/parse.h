#pragma once

// Strict integer parsing and value quoting for error messages (internal to lockstep::env).

#include <limits>
#include <optional>
#include <string>

namespace lockstep::env::detail {

/// `NAME=value` for messages; the value is quoted unless it is a plain decimal integer:
/// RANK=4, WORLD_SIZE='two', MASTER_ADDR=''.
std::string describe(const std::string& name, const std::string& value);

/// "[lo, hi]", as error messages state a range.
std::string range_text(long long lo, long long hi);

/// The value of a string of 1 to 18 decimal digits; std::nullopt for anything else (empty, sign,
/// spaces, other characters, or too long to be a sane count).
std::optional<long long> try_parse_digits(const std::string& value);

/// A strictly parsed decimal integer in [lo, hi] (0 <= lo <= hi): digits only, no sign, no spaces, no
/// trailing junk. Throws EnvError naming `name` and `value` otherwise, e.g.
/// "WORLD_SIZE='two' is not an integer: WORLD_SIZE must be a decimal integer in [1, 2147483647]" or
/// "MASTER_PORT=70000 is out of range [1, 65535]".
long long parse_integer(const std::string& name, const std::string& value, long long lo, long long hi);

/// parse_integer for int-valued fields.
int parse_int(const std::string& name, const std::string& value, int lo,
              int hi = std::numeric_limits<int>::max());

}  // namespace lockstep::env::detail
