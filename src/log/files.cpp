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

void replace_file(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw_io_error("creating", temporary);
    out << text;
    out.flush();
    if (!out) throw_io_error("writing", temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    throw_io_error("renaming '" + temporary + "' to", path);
}

std::string shortest_text(double value) {
  if (std::isnan(value)) return "nan";
  char text[64];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

}  // namespace lockstep::log::detail
