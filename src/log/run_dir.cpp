#include "lockstep/log/run_dir.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "files.h"

namespace lockstep::log {
namespace {

constexpr const char* kVersionPrefix = "version_";

// N of a directory named version_N (digits only), else -1.
long long version_number(const std::filesystem::directory_entry& entry) {
  const std::string name = entry.path().filename().string();
  const std::string prefix = kVersionPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 15 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  std::error_code error;
  return entry.is_directory(error) ? std::stoll(digits) : -1;
}

long long next_version(const std::filesystem::path& logs) {
  long long largest = -1;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(logs, error)) {
    largest = std::max(largest, version_number(entry));
  }
  if (error) {
    throw std::runtime_error("listing the log directory '" + logs.string() + "' failed: " + error.message());
  }
  return largest + 1;
}

}  // namespace

std::string next_version_dir(const std::string& root) {
  const std::filesystem::path logs = std::filesystem::path(root) / "lightning_logs";
  detail::create_log_dir(logs.string());
  for (long long version = next_version(logs);; ++version) {
    const std::filesystem::path dir = logs / (kVersionPrefix + std::to_string(version));
    std::error_code error;
    if (std::filesystem::create_directory(dir, error)) return dir.string();
    if (error) {
      throw std::runtime_error("creating the run directory '" + dir.string() +
                               "' failed: " + error.message() + " (pick a writable --default-root-dir)");
    }
    // Another process created it first: take the next number.
  }
}

}  // namespace lockstep::log
