#include "lockstep/log/hparams_yaml.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "files.h"
#include "lockstep/detail/atomic_file.h"

namespace lockstep::log {
namespace {

bool has_control_character(const std::string& text) {
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) return true;
  }
  return false;
}

bool is_number(const std::string& text) {
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

// A plain scalar would be read as something else, or break the `key: value` line.
bool needs_quotes(const std::string& text) {
  if (text.empty() || text.front() == ' ' || text.back() == ' ') return true;
  if (is_number(text)) return false;
  if (std::string_view("-?:,[]{}#&*!|>'\"%@`").find(text.front()) != std::string_view::npos) return true;
  return text.back() == ':' || text.find(": ") != std::string::npos || text.find(" #") != std::string::npos;
}

std::string double_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      char escape[8];
      std::snprintf(escape, sizeof(escape), "\\x%02X", u);
      out += escape;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string single_quoted(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += (c == '\'') ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string yaml_scalar(const std::string& text) {
  if (has_control_character(text)) return double_quoted(text);
  if (needs_quotes(text)) return single_quoted(text);
  return text;
}

void write_hparams_yaml(const std::string& dir, const Hparams& hparams) {
  detail::create_log_dir(dir);
  std::string text;
  for (const auto& [key, value] : hparams) text += yaml_scalar(key) + ": " + yaml_scalar(value) + "\n";
  lockstep::detail::write_file_atomically((std::filesystem::path(dir) / "hparams.yaml").string(), text);
}

}  // namespace lockstep::log
