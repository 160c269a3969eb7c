#pragma once

#include <cstdint>
#include <string>

namespace lockstep::train {

/// How many batches of an epoch to run (Lightning's limit_train_batches / limit_val_batches):
/// a count ("50") or a fraction of the epoch ("0.25"; "1.0" = all).
struct BatchLimit {
  bool is_fraction = true;
  double fraction = 1.0;  ///< in (0, 1] when is_fraction
  int64_t count = 0;      ///< >= 1 otherwise

  /// Parses "N" (a count >= 1) or "F" with a decimal point (a fraction in (0, 1]); throws
  /// std::invalid_argument naming `option` (as the caller calls it), the value, and what is accepted.
  static BatchLimit parse(const std::string& option, const std::string& text);
  /// The number of batches to run out of `available` (at least 1 when available > 0).
  int64_t apply(int64_t available) const;
  /// "50", "0.25", "1.0": what parse() reads back as the same limit.
  std::string to_string() const;
};

}  // namespace lockstep::train
