// hparams.yaml: read with yaml-cpp, written by hand as flat lines (report_hparams.h).
#include "report_hparams.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <yaml-cpp/yaml.h>

namespace lockstep::cli {
namespace {

void flatten(const YAML::Node& node, const std::string& key, Hparams& out) {
  if (node.IsMap()) {
    for (const auto& item : node) {
      flatten(item.second,
              key.empty() ? item.first.as<std::string>() : key + "." + item.first.as<std::string>(), out);
    }
  } else if (node.IsSequence()) {
    std::string text;
    for (const auto& item : node) {
      text += (text.empty() ? "" : ", ") + (item.IsScalar() ? item.as<std::string>() : YAML::Dump(item));
    }
    out.emplace_back(key, "[" + text + "]");
  } else if (node.IsScalar()) {
    out.emplace_back(key, node.as<std::string>());
  } else {
    out.emplace_back(key, "");  // `key:` with no value (YAML's null)
  }
}

bool yaml_keyword(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* word : {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"}) {
    if (text == word) return true;
  }
  return false;
}

bool plain_safe(const std::string& value) {
  if (value.empty() || yaml_keyword(value)) return false;
  const auto safe = [](unsigned char c) {
    return std::isalnum(c) || std::string("_./+-,").find(c) != std::string::npos;
  };
  if (!std::all_of(value.begin(), value.end(), safe)) return false;
  return value.front() != '-' || value.size() == 1 || std::isdigit(static_cast<unsigned char>(value[1])) ||
         value[1] == '.';
}

}  // namespace

Hparams parse_hparams_yaml(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(source + ": not YAML (" + e.what() + ")");
  }
  Hparams out;
  if (root.IsNull()) return out;
  if (!root.IsMap())
    throw std::runtime_error(source + ": expected `key: value` lines, found another YAML value");
  flatten(root, "", out);
  return out;
}

std::string format_hparams_yaml(const Hparams& hparams) {
  std::string out;
  for (const auto& [key, value] : hparams) {
    out += key + ": ";
    if (plain_safe(value)) {
      out += value;
    } else {
      out += '"';
      for (const char c : value) {
        if (c == '\n') {
          out += "\\n";
        } else {
          out += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
        }
      }
      out += '"';
    }
    out += '\n';
  }
  return out;
}

}  // namespace lockstep::cli
