#include "files.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace lockstep::log::detail {

void create_log_dir(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    throw std::runtime_error("creating the log directory '" + dir + "' failed: " + error.message() +
                             " (pick a writable --default-root-dir)");
  }
}

void throw_io_error(const std::string& action, const std::string& path) {
  throw std::runtime_error(action + " '" + path + "' failed: " + std::generic_category().message(errno));
}

std::string shortest_text(double value) {
  if (std::isnan(value)) return "nan";
  char text[64];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

}  // namespace lockstep::log::detail
