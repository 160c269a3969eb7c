#pragma once

#include <istream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace lockstep::cli {

/// CLI11's config-file reader and writer for YAML (`app.config_formatter(...)`), so that
/// `lockstep fit --config run.yaml` reads the same keys as the flags: each top-level `key: value` is the
/// flag `--key value` (`max-epochs: 5`; the underscore spellings the flags accept work too). CLI11 applies
/// a key only when its flag is not on the command line, so flags win. `key: null` (or `~`, or nothing)
/// leaves the flag unset, i.e. at its default.
///
/// Errors are CLI::ConfigError naming the file and the key: an unknown key (with the closest accepted
/// one), a list or mapping where a value belongs, or bad YAML (with its line).
///
/// Example:
///   auto* config = app.set_config("--config", "", "Read flags from a YAML file");
///   app.config_formatter(std::make_shared<YamlConfig>(app, *config));
class YamlConfig : public CLI::Config {
 public:
  /// `app` supplies the accepted keys (its configurable options' long names); `config_option`, the
  /// option that names the file, is read for error messages. Both must outlive this object.
  YamlConfig(const CLI::App& app, const CLI::Option& config_option)
      : app_(app), config_option_(config_option) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
  /// The effective configuration as YAML that from_config accepts back: every configurable option, in the
  /// order of --help, with its value (given, read from the file, or the default); `null` where unset, with
  /// the note set_notes() gave for it as a comment. The arguments CLI11 passes are ignored.
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;

  /// Comments for to_config, by key (e.g. {"lr", "default: 0.001 for adam"}).
  void set_notes(std::map<std::string, std::string> notes) { notes_ = std::move(notes); }
  /// The file's keys whose values were applied (not overridden by a flag), as canonical keys (the
  /// first long name of the option): to point an error about such a value at the file.
  const std::vector<std::string>& applied_keys() const { return applied_keys_; }
  /// The file being read ("" before --config was parsed).
  std::string file_name() const;

 private:
  const CLI::App& app_;
  const CLI::Option& config_option_;
  std::map<std::string, std::string> notes_;
  mutable std::vector<std::string> applied_keys_;
};

/// The accepted key closest to `key` by edit distance (at most a third of its length, at least 2 edits
/// allowed), or "" when none is that close. `max_epoch` -> `max-epochs`.
std::string closest_key(const std::string& key, const std::vector<std::string>& accepted);

}  // namespace lockstep::cli
