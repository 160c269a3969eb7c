#pragma once

// Parsing shared by the CLI's subcommands (header-only: used by targets with and without LibTorch).

#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace lockstep::cli {

/// CLI11's help for a command whose operands CLI11 does not parse (the command after the flags of an App
/// with prefix_command()): "Usage: NAME [OPTIONS] OPERANDS", the description, the flags, then `table` (if
/// any) and the footer.
class CommandFormatter : public CLI::Formatter {
 public:
  explicit CommandFormatter(std::string operands, std::string table = "")
      : operands_(std::move(operands)), table_(std::move(table)) {}
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "Usage: " + name + " [OPTIONS] " + operands_ + "\n";
  }
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    return make_usage(app, name) + "\n" + make_description(app) + make_groups(app, mode) + "\n" +
           (table_.empty() ? "" : table_ + "\n") + make_footer(app);
  }

 private:
  std::string operands_;
  std::string table_;
};

/// Parses argv into `app`. Returns -1 to go on; 0 after printing --help; after a parse error, what
/// `usage_error` (which prints the message) returns.
inline int parse_or_status(CLI::App& app, int argc, char** argv,
                           const std::function<int(const std::string&)>& usage_error) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }
}

/// The command after the flags of an App with prefix_command(), without a leading "--". When its first
/// word looks like an option, returns that word instead (CLI11 hands an unknown flag over as if it began
/// the command, and nothing sensible starts with '-'): the caller reports it.
inline std::optional<std::string> take_command(const CLI::App& app, std::vector<std::string>& command) {
  command = app.remaining();
  if (!command.empty() && command.front() == "--") {
    command.erase(command.begin());
  } else if (!command.empty() && command.front().size() > 1 && command.front()[0] == '-') {
    return command.front();
  }
  return std::nullopt;
}

}  // namespace lockstep::cli
