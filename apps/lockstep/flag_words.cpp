#include "flag_words.h"

#include <algorithm>

#include <CLI/CLI.hpp>

namespace lockstep::cli {
namespace {

bool opens(char c) {
  return c == ' ' || c == '(' || c == '\'' || c == '`';
}
bool closes(char c) {
  return c == ' ' || c == ')' || c == ',' || c == ':' || c == ';' || c == '\'' || c == '`' || c == '=';
}

// Whether `name` at `at` in `text` is written as an option (see in_flag_words).
bool stands_as_option(const std::string& text, size_t at, const std::string& name) {
  const size_t end = at + name.size();
  const bool alone = (at == 0 || opens(text[at - 1])) && (end == text.size() || closes(text[end]));
  if (!alone) return false;
  if (name.find('_') != std::string::npos) return true;
  const bool valued = end < text.size() && (text[end] == '=' || text.compare(end, 2, " '") == 0);
  return valued || at == 0;
}

}  // namespace

std::vector<OptionFlag> option_flags(const CLI::App& app) {
  std::vector<OptionFlag> flags;
  for (const CLI::Option* option : app.get_options()) {
    const std::vector<std::string>& names = option->get_lnames();
    if (names.empty()) continue;
    const std::string flag = "--" + names.front();
    for (std::string name : names) {
      std::replace(name.begin(), name.end(), '-', '_');
      if (std::none_of(flags.begin(), flags.end(), [&](const OptionFlag& f) { return f.first == name; })) {
        flags.emplace_back(name, flag);
      }
    }
  }
  // Longer names first: max_steps must not claim the start of max_steps_total (it cannot, being whole
  // words only, but the order keeps the rule obvious).
  std::sort(flags.begin(), flags.end(),
            [](const OptionFlag& a, const OptionFlag& b) { return a.first.size() > b.first.size(); });
  return flags;
}

std::string in_flag_words(const std::string& message, const std::vector<OptionFlag>& flags) {
  std::string out = message;
  for (const auto& [name, flag] : flags) {
    for (size_t at = out.find(name); at != std::string::npos; at = out.find(name, at)) {
      if (!stands_as_option(out, at, name)) {
        at += name.size();
        continue;
      }
      out.replace(at, name.size(), flag);
      at += flag.size();
    }
  }
  return out;
}

}  // namespace lockstep::cli
