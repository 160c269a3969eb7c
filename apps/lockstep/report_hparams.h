#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lockstep::cli {

/// A run's configuration as hparams.yaml holds it: (key, value) in file order, values as their text.
using Hparams = std::vector<std::pair<std::string, std::string>>;

/// Reads hparams.yaml (flat `key: value` lines, as Lightning's loggers write them). Nested maps are
/// flattened to `outer.inner` keys and sequences shown as `[a, b]`, so any YAML map is shown. Throws
/// std::runtime_error naming `source` when the text is not YAML or its top level is not a map.
Hparams parse_hparams_yaml(const std::string& text, const std::string& source);

}  // namespace lockstep::cli
