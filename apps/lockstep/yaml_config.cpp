#include "yaml_config.h"

#include <algorithm>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace lockstep::cli {
namespace {

// Options a config file may set: those with a long name, minus --help, --config and the like (which
// CLI11 or parse_fit_flags mark non-configurable).
bool is_configurable(const CLI::Option* option) {
  return option->get_configurable() && !option->get_lnames().empty() && option->get_lnames()[0] != "help";
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string line_of(const YAML::Node& node) {
  return node.Mark().is_null() ? std::string() : " (line " + std::to_string(node.Mark().line + 1) + ")";
}

// What a node that is not a single value is, for errors.
std::string kind_of(const YAML::Node& node) {
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "empty";
}

}  // namespace

std::string closest_key(const std::string& key, const std::vector<std::string>& accepted) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, key.size() / 3) + 1;
  for (const std::string& candidate : accepted) {
    const std::size_t d = edit_distance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

std::string YamlConfig::file_name() const {
  const std::vector<std::string>& given = config_option_.results();
  return given.empty() ? std::string() : given.back();
}

std::vector<CLI::ConfigItem> YamlConfig::from_config(std::istream& input) const {
  const std::string where = "--config " + file_name();
  // A config is a few hundred bytes; a file over the limit is not one (and is not read into memory whole).
  constexpr std::streamsize kMaxConfigBytes = std::streamsize{1} << 20;
  std::string text(static_cast<size_t>(kMaxConfigBytes) + 1, '\0');
  input.read(&text[0], kMaxConfigBytes + 1);
  if (input.gcount() > kMaxConfigBytes) {
    throw CLI::ConfigError(where + ": over the limit of 1 MiB for a config file (is it the right file?)");
  }
  text.resize(static_cast<size_t>(input.gcount()));
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw CLI::ConfigError(where + ": not valid YAML: " + e.what());
  }
  if (root.IsNull()) return {};  // an empty file sets nothing
  if (!root.IsMap()) {
    throw CLI::ConfigError(where +
                           ": expected `key: value` lines (the flag names without '--', e.g. "
                           "`max-epochs: 5`), got a " +
                           std::string(root.IsSequence() ? "list" : "single value"));
  }

  std::vector<std::string> canonical;  // the first long name of each configurable option, in --help order
  for (const CLI::Option* option : app_.get_options(is_configurable))
    canonical.push_back(option->get_lnames()[0]);

  applied_keys_.clear();
  std::vector<CLI::ConfigItem> items;
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) {  // `[a, b]: 1`, `{a: 1}: 2`, `? : 3`: yaml-cpp would not convert them
      throw CLI::ConfigError(where + ": a key" + line_of(entry.first) + " is " + kind_of(entry.first) +
                             "; the keys are the flag names of 'lockstep fit --help' without '--'");
    }
    const std::string key = entry.first.Scalar();
    const std::string name = key.rfind("--", 0) == 0 ? key.substr(2) : key;
    const CLI::Option* option = nullptr;
    for (const CLI::Option* candidate : app_.get_options(is_configurable)) {
      const std::vector<std::string>& names = candidate->get_lnames();
      if (std::find(names.begin(), names.end(), name) != names.end()) option = candidate;
    }
    if (option == nullptr) {
      const std::string near = closest_key(name, canonical);
      throw CLI::ConfigError(where + ": unknown key '" + key + "'" + line_of(entry.first) +
                             (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                             "; the keys are the flag names of 'lockstep fit --help' without '--'");
    }
    const YAML::Node& value = entry.second;
    if (value.IsNull()) continue;  // unset: the flag's default
    if (!value.IsScalar()) {
      throw CLI::ConfigError(where + ": key '" + key + "'" + line_of(value) + " needs a single value, got " +
                             kind_of(value));
    }
    CLI::ConfigItem item;
    item.name = name;
    item.inputs = {value.Scalar()};
    items.push_back(std::move(item));
    if (option->count() == 0) applied_keys_.push_back(option->get_lnames()[0]);  // else the flag wins
  }
  return items;
}

std::string YamlConfig::to_config(const CLI::App* /*app*/, bool /*default_also*/, bool /*write_description*/,
                                  std::string /*prefix*/) const {
  YAML::Emitter out;
  out.SetNullFormat(YAML::LowerNull);
  out << YAML::BeginMap;
  for (const CLI::Option* option : app_.get_options(is_configurable)) {
    const std::string key = option->get_lnames()[0];
    const std::string value = option->count() > 0 ? option->results().back() : option->get_default_str();
    out << YAML::Key << key << YAML::Value;
    if (value.empty()) {
      out << YAML::Null;
    } else {
      out << value;
    }
    if (const auto note = notes_.find(key); note != notes_.end()) out << YAML::Comment(note->second);
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace lockstep::cli
