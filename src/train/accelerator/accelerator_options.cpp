// AcceleratorOptions (include/lockstep/train/accelerator/accelerator_options.h): their checks, and the
// variables Accelerate's launcher gives its workers, read into them (resolve_launch_environment).
#include "lockstep/train/accelerator/accelerator_options.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../option_checks.h"
#include "lockstep/detail/join.h"

namespace lockstep::train {
namespace {

constexpr const char* kMixedPrecisionVariable = "ACCELERATE_MIXED_PRECISION";
constexpr const char* kAccumulationVariable = "ACCELERATE_GRADIENT_ACCUMULATION_STEPS";
constexpr const char* kUseCpuVariable = "ACCELERATE_USE_CPU";

// A variable's value; std::nullopt when it is unset or empty.
std::optional<std::string> read(const env::EnvLookup& lookup, const char* name) {
  std::optional<std::string> value = lookup(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

std::string shown(const char* name, const std::string& value) {
  return std::string(name) + "='" + value + "'";
}

// The values `accelerate launch --mixed_precision` writes (Accelerate's PrecisionType, lower case).
Precision parse_mixed_precision(const std::string& value) {
  if (value == "no") return Precision::k32;
  if (value == "fp16") return Precision::k16Mixed;
  if (value == "bf16") return Precision::kBf16Mixed;
  if (value == "fp8") {
    throw std::invalid_argument(
        shown(kMixedPrecisionVariable, value) +
        " asks for float8 training, which lockstep does not have (Accelerate's needs Transformer Engine, "
        "MS-AMP or torchao on a GPU of compute capability 8.9 or later): launch with --mixed_precision bf16, "
        "fp16 or no");
  }
  throw std::invalid_argument(shown(kMixedPrecisionVariable, value) +
                              " is not a precision (expected no, fp16 or bf16, as accelerate launch and "
                              "lockstep launch --mixed_precision write it)");
}

int64_t parse_accumulation_steps(const std::string& value) {
  const bool digits = value.find_first_not_of("0123456789") == std::string::npos && value.size() <= 18;
  if (!digits || std::stoll(value) < 1) {
    throw std::invalid_argument(shown(kAccumulationVariable, value) +
                                " is not valid (expected an integer >= 1, as lockstep launch "
                                "--gradient_accumulation_steps writes it)");
  }
  return std::stoll(value);
}

// Accelerate's str_to_bool: y, yes, t, true, on, 1 and n, no, f, false, off, 0, in any case.
bool parse_truth(const std::string& value) {
  std::string lower = value;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* yes : {"y", "yes", "t", "true", "on", "1"})
    if (lower == yes) return true;
  for (const char* no : {"n", "no", "f", "false", "off", "0"})
    if (lower == no) return false;
  throw std::invalid_argument(shown(kUseCpuVariable, value) +
                              " is not a truth value (expected true or false: y, yes, t, true, on, 1 or n, "
                              "no, f, false, off, 0, in any case)");
}

}  // namespace

void AcceleratorOptions::validate() const {
  if (gradient_accumulation_steps_ && *gradient_accumulation_steps_ < 1) {
    throw std::invalid_argument("AcceleratorOptions::gradient_accumulation_steps must be >= 1, got " +
                                std::to_string(*gradient_accumulation_steps_) + " (1 means no accumulation)");
  }
  try {
    strategy_.validate(mixed_precision_.value_or(Precision::k32), "mixed_precision");
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("AcceleratorOptions: ") + e.what());
  }
  try {
    if (elastic_)
      detail::check_elastic({strategy_.kind(), backend_, /*cuda_graphs=*/false, /*callers_group=*/""});
    detail::TensorParallelUse use;
    use.tensor_parallel = tensor_parallel_;
    use.strategy = strategy_.kind();
    use.elastic = elastic_;
    detail::check_tensor_parallel(use);
    detail::check_pipeline_parallel({pipeline_parallel_, micro_batches_, pipeline_cut_.size(),
                                     tensor_parallel_, strategy_, mixed_precision_.value_or(Precision::k32),
                                     elastic_,
                                     /*cuda_graphs=*/false});
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("AcceleratorOptions: ") + e.what());
  }
}

AcceleratorOptions resolve_launch_environment(AcceleratorOptions options, const env::EnvLookup& lookup) {
  options.validate();                      // the program's own mistakes, named as such
  std::vector<std::string> from_launcher;  // the variables that filled an option, for a validate() error
  if (!options.mixed_precision()) {
    const std::optional<std::string> value = read(lookup, kMixedPrecisionVariable);
    options.mixed_precision(value ? parse_mixed_precision(*value) : Precision::k32);
    if (value) from_launcher.push_back(shown(kMixedPrecisionVariable, *value));
  }
  if (!options.gradient_accumulation_steps()) {
    const std::optional<std::string> value = read(lookup, kAccumulationVariable);
    options.gradient_accumulation_steps(value ? parse_accumulation_steps(*value) : 1);
    if (value) from_launcher.push_back(shown(kAccumulationVariable, *value));
  }
  if (!options.cpu()) {
    // A program that asked for the GPU chose its device: the launcher's "use the CPU" does not move it.
    const bool chose_gpu = options.accelerator() == AcceleratorKind::kGpu;
    const std::optional<std::string> value = chose_gpu ? std::nullopt : read(lookup, kUseCpuVariable);
    options.cpu(value ? parse_truth(*value) : false);
  }
  try {
    options.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(e.what()) + " (set by the launcher: " +
                                lockstep::detail::join(from_launcher, ", ") + ")");
  }
  return options;
}

}  // namespace lockstep::train
