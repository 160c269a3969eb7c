#include "lockstep/log/make_loggers.h"

#include <algorithm>
#include <stdexcept>

#include "lockstep/log/csv_logger.h"
#include "lockstep/log/jsonl_logger.h"
#include "lockstep/log/tensorboard_logger.h"

namespace lockstep::log {
namespace {

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> parts;
  if (trimmed(names).empty()) return parts;
  std::size_t start = 0;
  for (std::size_t comma = names.find(',');; comma = names.find(',', start)) {
    parts.push_back(trimmed(names.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

bool is_logger_name(const std::string& name) {
  return name == "tensorboard" || name == "csv" || name == "jsonl";
}

// Every name known and listed once, checked before any logger creates a file.
void check_names(const std::vector<std::string>& parts, const std::string& names) {
  for (auto it = parts.begin(); it != parts.end(); ++it) {
    if (!is_logger_name(*it)) {
      throw std::invalid_argument("logger '" + *it + "' in '" + names +
                                  "' is not known (expected a comma-separated list of: " + kLoggerNames +
                                  ")");
    }
    if (std::find(parts.begin(), it, *it) != it) {
      throw std::invalid_argument("logger '" + *it + "' is listed twice in '" + names +
                                  "' (expected each of " + kLoggerNames + " at most once)");
    }
  }
}

std::unique_ptr<Logger> make_logger(const std::string& name, const std::string& version_dir) {
  if (name == "tensorboard") return std::make_unique<TensorBoardLogger>(version_dir);
  if (name == "csv") return std::make_unique<CsvLogger>(version_dir);
  return std::make_unique<JsonlLogger>(version_dir);
}

}  // namespace

void check_logger_names(const std::string& names) {
  check_names(split_names(names), names);
}

std::vector<std::unique_ptr<Logger>> make_loggers(const std::string& names, const std::string& version_dir) {
  const std::vector<std::string> parts = split_names(names);
  check_names(parts, names);
  std::vector<std::unique_ptr<Logger>> loggers;
  loggers.reserve(parts.size());
  for (const std::string& name : parts) loggers.push_back(make_logger(name, version_dir));
  return loggers;
}

}  // namespace lockstep::log
