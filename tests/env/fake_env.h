#pragma once

// A fake environment for the env tests: a table of variables instead of getenv.

#include <lockstep/env/environment.h>

#include <map>
#include <optional>
#include <string>

namespace lockstep::env::fake_env {

using Vars = std::map<std::string, std::string>;

/// An EnvLookup that answers from `vars`.
inline EnvLookup table(Vars vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace lockstep::env::fake_env
