#include "lockstep/train/batch_limit.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "option_checks.h"

namespace lockstep::train {
BatchLimit BatchLimit::parse(const std::string& option, const std::string& text_value) {
  BatchLimit limit;
  const bool fractional = text_value.find_first_of(".eE") != std::string::npos;
  try {
    std::size_t used = 0;
    if (fractional) {
      const double f = std::stod(text_value, &used);
      if (used == text_value.size() && f > 0.0 && f <= 1.0) {
        limit.is_fraction = true;
        limit.fraction = f;
        return limit;
      }
    } else {
      const long long n = std::stoll(text_value, &used);
      if (used == text_value.size() && n >= 1) {
        limit.is_fraction = false;
        limit.count = n;
        return limit;
      }
    }
  } catch (const std::exception&) {
    // fall through to the error below
  }
  throw std::invalid_argument(option + " '" + text_value +
                              "' is not a batch count >= 1 (e.g. 50) or a fraction in (0, 1] (e.g. 0.25)");
}

int64_t BatchLimit::apply(int64_t available) const {
  if (available <= 0) return 0;
  if (!is_fraction) return std::min(available, count);
  const auto n = static_cast<int64_t>(std::floor(fraction * static_cast<double>(available)));
  return std::clamp<int64_t>(n, 1, available);
}

std::string BatchLimit::to_string() const {
  if (!is_fraction) return detail::text(count);
  const std::string shown = detail::text(fraction);  // "0.25"; "1" would read back as a count
  return shown.find_first_of(".eE") == std::string::npos ? shown + ".0" : shown;
}

}  // namespace lockstep::train
