#include "lockstep/train/precision_mode.h"

#include <stdexcept>

namespace lockstep::train {

Precision parse_precision(const std::string& text) {
  if (text == "32" || text == "32-true" || text == "no") return Precision::k32;
  if (text == "bf16-mixed" || text == "bf16") return Precision::kBf16Mixed;
  if (text == "16-mixed" || text == "fp16") return Precision::k16Mixed;
  throw std::invalid_argument(
      "precision '" + text +
      "' is not known (expected one of: 32, bf16-mixed, 16-mixed; Accelerate's no, bf16, fp16 and "
      "32-true are accepted too)");
}

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::k32:
      return "32";
    case Precision::kBf16Mixed:
      return "bf16-mixed";
    case Precision::k16Mixed:
      return "16-mixed";
  }
  return "?";
}

}  // namespace lockstep::train
