// The flags the data examples share (char_lm, tabular, torch_data): Lightning's names for the Trainer's
// options, plus what each example adds. Header-only, for the examples alone.
#pragma once

#include <cstdio>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include "lockstep/train/trainer.h"

namespace examples {

/// `value` as a whole number for `flag`; throws std::invalid_argument naming both otherwise.
inline long long whole_number(const std::string& flag, const std::string& value) {
  std::size_t used = 0;
  long long number = 0;
  try {
    number = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size())
    throw std::invalid_argument(flag + " '" + value + "' is not a whole number");
  return number;
}

/// `value` as a real number for `flag`; throws std::invalid_argument naming both otherwise.
inline double real_number(const std::string& flag, const std::string& value) {
  std::size_t used = 0;
  double number = 0;
  try {
    number = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size())
    throw std::invalid_argument(flag + " '" + value + "' is not a number");
  return number;
}

/// Reads `--flag value` pairs: the Trainer's (--devices, --max-epochs, --max-steps, --batch-size,
/// --limit-train-batches, --limit-val-batches, --ckpt-dir, --resume, --seed, --precision) into `trainer`
/// and `batch_size`, the example's own (named in `extra`, with their defaults) into the returned map.
/// Throws std::invalid_argument naming an unknown flag or a flag without a value.
inline std::map<std::string, std::string> parse_flags(int argc, char** argv,
                                                      lockstep::train::TrainerOptions& trainer,
                                                      int64_t& batch_size,
                                                      std::map<std::string, std::string> extra,
                                                      const char* example) {
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc)
      throw std::invalid_argument(flag + " needs a value (see the top of examples/" + example + ".cpp)");
    const std::string value = argv[i + 1];
    if (flag == "--devices") {
      trainer.devices(static_cast<int>(whole_number(flag, value)));
    } else if (flag == "--max-epochs") {
      trainer.max_epochs(whole_number(flag, value));
    } else if (flag == "--max-steps") {
      trainer.max_steps(whole_number(flag, value));
    } else if (flag == "--batch-size") {
      batch_size = whole_number(flag, value);
    } else if (flag == "--limit-train-batches") {
      trainer.limit_train_batches(lockstep::train::BatchLimit::parse("limit_train_batches", value));
    } else if (flag == "--limit-val-batches") {
      trainer.limit_val_batches(lockstep::train::BatchLimit::parse("limit_val_batches", value));
    } else if (flag == "--ckpt-dir") {
      trainer.ckpt_dir(value);
    } else if (flag == "--resume") {
      trainer.resume(value);
    } else if (flag == "--seed") {
      trainer.seed(static_cast<uint64_t>(whole_number(flag, value)));
    } else if (flag == "--precision") {
      trainer.precision(lockstep::train::parse_precision(value));
    } else if (flag.rfind("--", 0) == 0 && extra.count(flag.substr(2))) {
      extra[flag.substr(2)] = value;
    } else {
      throw std::invalid_argument("unknown option '" + flag + "' (see the top of examples/" + example +
                                  ".cpp)");
    }
  }
  return extra;
}

/// Runs `body`, printing an exception as "EXAMPLE: what" and returning 1.
inline int run_example(const char* example, const std::function<void()>& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", example, e.what());
    return 1;
  }
}

}  // namespace examples
