#include "lockstep/train/precision_mode.h"

#include <stdexcept>

#include "lockstep/detail/enum_names.h"
namespace lockstep::train {

namespace {

// Lightning's spellings first (what to_string writes), then the aliases: Lightning's "32-true" and
// Accelerate's "no", "bf16", "fp16".
constexpr lockstep::detail::EnumNames<Precision, 7> kPrecisionNames{
    {{Precision::k32, "32"},
     {Precision::kBf16Mixed, "bf16-mixed"},
     {Precision::k16Mixed, "16-mixed"},
     {Precision::k32, "32-true", /*alias=*/true},
     {Precision::k32, "no", /*alias=*/true},
     {Precision::kBf16Mixed, "bf16", /*alias=*/true},
     {Precision::k16Mixed, "fp16", /*alias=*/true}}};

}  // namespace

Precision parse_precision(const std::string& text) {
  return lockstep::detail::parse_enum(kPrecisionNames, text, "precision",
                                      "Accelerate's no, bf16, fp16 and 32-true are accepted too");
}

const char* to_string(Precision precision) {
  return lockstep::detail::enum_to_string(kPrecisionNames, precision);
}

}  // namespace lockstep::train
