#pragma once

// One table of names per enum: to_string, the parser and the parser's error text all read it, so an
// enum's spellings are written once. Header-only and torch-free, so every layer and the CLI can use it.
//
// Example (in the enum's .cpp; the public functions stay as they are declared in its header):
//   constexpr lockstep::detail::EnumNames<Backend, 3> kBackendNames{{
//       {Backend::kAuto, "auto"}, {Backend::kGloo, "gloo"}, {Backend::kNccl, "nccl"}}};
//   const char* to_string(Backend b) { return lockstep::detail::enum_to_string(kBackendNames, b); }
//   Backend parse_backend(const std::string& text) {
//     return lockstep::detail::parse_enum(kBackendNames, text, "backend");
//     // throws "backend 'tcp' is not known (expected one of: auto, gloo, nccl)"
//   }

#include <array>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace lockstep::detail {

/// One spelling of an enum value. The first entry of a value is its name (what to_string writes and the
/// error lists, in table order); entries marked `alias` are further spellings the parser accepts but
/// neither writes nor lists ("cuda" for gpu, Accelerate's "fp16" for 16-mixed).
template <typename Enum>
struct EnumName {
  Enum value;
  const char* name;
  bool alias = false;
};

/// The table of an enum: its names and aliases, the names in the order errors list them.
template <typename Enum, std::size_t N>
using EnumNames = std::array<EnumName<Enum>, N>;

/// The name of `value` (its first entry that is no alias); "?" for a value the table lacks (a value cast
/// from an int out of range).
template <typename Enum, std::size_t N>
constexpr const char* enum_to_string(const EnumNames<Enum, N>& table, Enum value) {
  for (const EnumName<Enum>& entry : table) {
    if (entry.value == value && !entry.alias) return entry.name;
  }
  return "?";
}

/// The value spelled `text` (a name or an alias, exactly, case-sensitive), or nullopt.
template <typename Enum, std::size_t N>
constexpr std::optional<Enum> find_enum(const EnumNames<Enum, N>& table, std::string_view text) {
  for (const EnumName<Enum>& entry : table) {
    if (text == entry.name) return entry.value;
  }
  return std::nullopt;
}

/// The names (aliases left out) in table order, separated by `separator`: "auto, cpu, gpu".
template <typename Enum, std::size_t N>
std::string enum_names_text(const EnumNames<Enum, N>& table, std::string_view separator = ", ") {
  std::string out;
  for (const EnumName<Enum>& entry : table) {
    if (entry.alias) continue;
    if (!out.empty()) out += separator;
    out += entry.name;
  }
  return out;
}

/// The value spelled `text`. Throws std::invalid_argument "WHAT 'TEXT' is not known (expected one of:
/// NAMES)", with "; NOTE" after the names when `note` is given (say there which aliases are accepted).
template <typename Enum, std::size_t N>
Enum parse_enum(const EnumNames<Enum, N>& table, const std::string& text, std::string_view what,
                std::string_view note = {}) {
  if (const std::optional<Enum> value = find_enum(table, text)) return *value;
  std::string message =
      std::string(what) + " '" + text + "' is not known (expected one of: " + enum_names_text(table);
  if (!note.empty()) message += "; " + std::string(note);
  throw std::invalid_argument(message + ")");
}

}  // namespace lockstep::detail
