// hparams.yaml: read with yaml-cpp, written by hand as flat lines (report_hparams.h).
#include "report_hparams.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <yaml-cpp/yaml.h>

#include "lockstep/detail/join.h"

namespace lockstep::cli {
namespace {

void flatten(const YAML::Node& node, const std::string& key, const std::string& source, Hparams& out) {
  if (node.IsMap()) {
    for (const auto& item : node) {
      if (!item.first.IsScalar()) {  // `[a, b]: 1`, `? : 2`: yaml-cpp would not convert them to text
        throw std::runtime_error(source + ": line " + std::to_string(item.first.Mark().line + 1) +
                                 ": a key that is not a name (a list, a mapping or nothing)");
      }
      flatten(item.second, key.empty() ? item.first.Scalar() : key + "." + item.first.Scalar(), source, out);
    }
  } else if (node.IsSequence()) {
    const std::string text = lockstep::detail::join(node, ", ", [](const YAML::Node& item) {
      return item.IsScalar() ? item.as<std::string>() : YAML::Dump(item);
    });
    out.emplace_back(key, "[" + text + "]");
  } else if (node.IsScalar()) {
    out.emplace_back(key, node.as<std::string>());
  } else {
    out.emplace_back(key, "");  // `key:` with no value (YAML's null)
  }
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
  flatten(root, "", source, out);
  return out;
}

}  // namespace lockstep::cli
