// `lockstep bench scaling`: strong scaling of `lockstep fit`. Runs this CLI's own `lockstep fit` as a child
// process at each rank count (the CLI never loads LibTorch), reads each run's --metrics-file and prints
// time per epoch, speedup and efficiency as a markdown table.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "lockstep/detail/join.h"

#include "bench_commands.h"
#include "bench_metrics.h"
#include "bench_run_dir.h"
#include "bench_temp_dir.h"
#include "child_process.h"
#include "fit_flags.h"
#include "install_paths.h"

namespace lockstep::cli {
namespace {

constexpr const char* kScalingName = "lockstep bench scaling";

constexpr const char* kScalingDescription =
    "Strong scaling of `lockstep fit`: the same workload (the whole training split each epoch, the\n"
    "same batch size per rank) at each rank count of --ranks, one run after the other. Prints a\n"
    "markdown table:\n"
    "  time/epoch  the median epoch_s of the run (training part, slowest rank; validation\n"
    "              excluded), scaled to the whole training split when --limit-train-batches cuts\n"
    "              the epoch: times (split size / train_samples of the epoch)\n"
    "  speedup     t(first rank count) / t(n)\n"
    "  efficiency  speedup / (n / first rank count), in % (with --ranks 1,...: speedup / n)\n"
    "Flags after -- go to every `lockstep fit` run unchanged (e.g. --limit-train-batches 100,\n"
    "--batch-size 128, --data-dir DIR). With --run-dir DIR the table is also written to\n"
    "DIR/scaling.csv (ranks,time_per_epoch_s,speedup,efficiency_pct; rewritten after each row) and\n"
    "the settings to DIR/hparams.yaml: `lockstep report DIR` shows them.";

constexpr const char* kScalingFooter =
    "Each run is `lockstep fit --devices N --model M --data D --threads T --max-epochs E --progress\n"
    "off --metrics-file TMP [flags after --]`; its errors are printed as they happen. --devices,\n"
    "--num-nodes, --max-epochs, --metrics-file, --progress, --model, --data and --threads belong to\n"
    "this command and are refused after --.\n"
    "\n"
    "Examples:\n"
    "  lockstep bench scaling\n"
    "  lockstep bench scaling --model cnn --epochs 2 -- --limit-train-batches 100\n"
    "  lockstep bench scaling --ranks 1,2,4 --threads 1 -- --batch-size 128\n"
    "  lockstep bench scaling --run-dir scaling && lockstep report scaling -o scaling.html\n"
    "Exit status: 0 on success, 1 when a run fails or --run-dir cannot be written, 2 for bad\n"
    "flags.";

// CLI11's help with our usage line (the flags after -- are not CLI11 options).
class ScalingFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "Usage: " + name + " [OPTIONS] [-- LOCKSTEP_FIT_FLAGS...]\n";
  }
};

// "1,2,4" -> {1, 2, 4}.
std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> ranks;
  std::stringstream in(text);
  std::string item;
  std::set<int> seen;
  while (std::getline(in, item, ',')) {
    const bool digits =
        !item.empty() && item.size() <= 6 && item.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoi(item) < 1) {
      throw std::invalid_argument("--ranks '" + text +
                                  "' is not a list of rank counts >= 1 (expected e.g. 1,2,4)");
    }
    if (!seen.insert(std::stoi(item)).second) {
      throw std::invalid_argument("--ranks '" + text + "' names " + item + " twice");
    }
    ranks.push_back(std::stoi(item));
  }
  if (ranks.empty() || text.back() == ',') {
    throw std::invalid_argument("--ranks '" + text +
                                "' is not a list of rank counts >= 1 (expected e.g. 1,2,4)");
  }
  return ranks;
}

// The flags of `lockstep fit` that this command sets itself.
const std::set<std::string>& owned_fit_flags() {
  static const std::set<std::string> flags{"--devices",    "--num-nodes",    "--num_nodes",    "--max-epochs",
                                           "--max_epochs", "--metrics-file", "--metrics_file", "--progress",
                                           "--model",      "--data",         "--threads"};
  return flags;
}

// The training split's size, from the first line `lockstep fit` prints ("... (60000 train / 10000 test
// images) ...", or for text "(36234 train / 4026 val windows of 65 bytes)"); 0 when absent.
long long training_split_size(const std::string& stdout_path) {
  std::ifstream in(stdout_path);
  std::string line;
  static const std::regex pattern(R"(\((\d+) train / \d+ (?:test images\)|val windows ))");
  std::smatch match;
  while (std::getline(in, line)) {
    if (std::regex_search(line, match, pattern)) return std::stoll(match[1].str());
  }
  return 0;
}

void print_file(const std::string& path, std::ostream& out) {
  std::ifstream in(path);
  out << in.rdbuf();
}

// `value` with `digits` decimals, for scaling.csv.
std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

}  // namespace

int bench_scaling_main(int argc, char** argv) {
  // Everything after the first "--" goes to `lockstep fit`.
  std::vector<std::string> fit_extra;
  int own_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      own_argc = i;
      fit_extra.assign(argv + i + 1, argv + argc);
      break;
    }
  }

  const train::FitConfig defaults;
  std::string model = defaults.model;
  std::string data = defaults.data;
  std::string ranks_text = "1,2";
  int epochs = 3;
  int threads = 1;
  std::string run_dir;
  CLI::App app(kScalingDescription, kScalingName);
  app.footer(kScalingFooter);
  app.formatter(std::make_shared<ScalingFormatter>());
  app.get_formatter()->column_width(30);
  const auto joined = [](const std::vector<std::string>& names) {
    return lockstep::detail::join(names, "|");
  };
  app.add_option("--model", model, "Model (as lockstep fit --model)")
      ->type_name(joined(train::fit_model_names()))
      ->capture_default_str();
  app.add_option("--data", data, "Dataset (as lockstep fit --data)")
      ->type_name(joined(train::fit_data_names()))
      ->capture_default_str();
  app.add_option("--ranks", ranks_text, "Rank counts, comma-separated; the first is the\nbaseline")
      ->type_name("N,N,...")
      ->capture_default_str();
  app.add_option("--epochs", epochs, "Epochs per run (time/epoch is their median)")->capture_default_str();
  app.add_option("--threads", threads, "Intra-op threads per rank (0: cores / ranks)")->capture_default_str();
  app.add_option("--run-dir", run_dir,
                 "Also write DIR/scaling.csv and DIR/hparams.yaml\n(for lockstep report)")
      ->type_name("DIR");
  if (const int status = parse_bench_flags(app, own_argc, argv); status >= 0) return status;

  std::vector<int> ranks;
  try {
    ranks = parse_ranks(ranks_text);
  } catch (const std::invalid_argument& e) {
    return bench_usage_error(kScalingName, e.what());
  }
  // "" when `value` is one of `names`, else the usage message.
  const auto unknown = [](const std::string& flag, const std::string& value,
                          const std::vector<std::string>& names) {
    if (std::find(names.begin(), names.end(), value) != names.end()) return std::string();
    return flag + " '" + value + "' is not known (expected one of: " + lockstep::detail::join(names, ", ") +
           ")";
  };
  if (const std::string error = unknown("--model", model, train::fit_model_names()); !error.empty()) {
    return bench_usage_error(kScalingName, error);
  }
  if (const std::string error = unknown("--data", data, train::fit_data_names()); !error.empty()) {
    return bench_usage_error(kScalingName, error);
  }
  if (epochs < 1)
    return bench_usage_error(kScalingName, "--epochs must be >= 1, got " + std::to_string(epochs));
  if (threads < 0)
    return bench_usage_error(kScalingName, "--threads must be >= 0, got " + std::to_string(threads));
  for (const std::string& arg : fit_extra) {
    const std::string flag = arg.substr(0, arg.find('='));
    if (owned_fit_flags().count(flag) != 0) {
      return bench_usage_error(kScalingName,
                               "'" + arg +
                                   "' after -- is set by this command (use its --ranks, --epochs, "
                                   "--model, --data, --threads)");
    }
  }

  // Every run's full `lockstep fit` command line, checked by fit's own parser before anything starts.
  const std::string self = self_executable();
  if (self.empty()) {
    std::cerr << kScalingName << ": cannot find this executable (/proc/self/exe) to run `lockstep fit`\n";
    return 1;
  }
  std::unique_ptr<BenchTempDir> tmp;
  try {
    tmp = std::make_unique<BenchTempDir>();
  } catch (const std::exception& e) {
    std::cerr << kScalingName << ": " << e.what() << '\n';
    return 1;
  }
  std::vector<std::vector<std::string>> commands;
  train::FitConfig config;
  for (const int n : ranks) {
    // clang-format off
    std::vector<std::string> command{self, "fit",
                                     "--devices", std::to_string(n),
                                     "--model", model,
                                     "--data", data,
                                     "--threads", std::to_string(threads),
                                     "--max-epochs", std::to_string(epochs),
                                     "--progress", "off",
                                     "--metrics-file", tmp->file("fit" + std::to_string(n) + ".jsonl")};
    // clang-format on
    command.insert(command.end(), fit_extra.begin(), fit_extra.end());
    std::vector<char*> fit_argv;
    for (size_t i = 1; i < command.size(); ++i) fit_argv.push_back(command[i].data());
    if (const int status = parse_fit_flags(static_cast<int>(fit_argv.size()), fit_argv.data(), config);
        status >= 0) {
      if (status != 0) std::cerr << kScalingName << ": (the flags after -- are lockstep fit's)\n";
      return status;
    }
    commands.push_back(std::move(command));
  }
  if (const int status = refuse_inside_job(kScalingName); status != 0) return status;

  std::string extra_text;
  for (const std::string& arg : fit_extra) extra_text += " " + arg;
  std::unique_ptr<BenchRunDir> results;
  CsvTable table{{"ranks", "time_per_epoch_s", "speedup", "efficiency_pct"}, {}};
  if (!run_dir.empty()) {
    Hparams settings{{"bench", "scaling"},
                     {"model", model},
                     {"data", data},
                     {"ranks", ranks_text},
                     {"epochs", std::to_string(epochs)},
                     {"threads", std::to_string(threads)},
                     {"batch_size", std::to_string(config.batch_size)}};
    if (!fit_extra.empty()) settings.emplace_back("fit_flags", extra_text.substr(1));
    settings.emplace_back("lockstep_version", LOCKSTEP_VERSION);
    try {
      results = std::make_unique<BenchRunDir>(run_dir, settings);
      results->write_table("scaling.csv", table);
    } catch (const std::exception& e) {
      std::cerr << kScalingName << ": " << e.what() << '\n';
      return 1;
    }
  }
  std::printf("lockstep fit --model %s --data %s, %d epoch(s), batch %lld/rank, %d thread(s)/rank%s\n",
              model.c_str(), data.c_str(), epochs, static_cast<long long>(config.batch_size), threads,
              extra_text.c_str());
  std::printf("| ranks | time/epoch | speedup | efficiency |\n|---|---|---|---|\n");
  std::fflush(stdout);

  double t_first = 0;
  long long split = 0;
  for (size_t k = 0; k < ranks.size(); ++k) {
    const int n = ranks[k];
    const std::string out = tmp->file("out" + std::to_string(n) + ".txt");
    const std::string metrics = tmp->file("fit" + std::to_string(n) + ".jsonl");
    try {
      const int status = run_child(commands[k], {out, ""});
      if (status != 0) {
        std::cerr << kScalingName << ": `" << shell_line(commands[k]) << "` failed with exit status "
                  << status << "; its output:\n";
        print_file(out, std::cerr);
        return 1;
      }
      const auto records = read_jsonl(metrics);
      if (records.empty()) throw std::runtime_error("lockstep fit wrote no metrics to " + metrics);
      const double epoch_s = median(numeric_field(records, "epoch_s", metrics));
      const double trained = median(numeric_field(records, "train_samples", metrics));
      split = training_split_size(out);
      if (split <= 0 || trained <= 0) {
        std::cerr << kScalingName << ": cannot find the training split's size in lockstep fit's output:\n";
        print_file(out, std::cerr);
        return 1;
      }
      const double t = epoch_s * static_cast<double>(split) / trained;
      if (k == 0) t_first = t;
      const double speedup = t_first / t;
      const double efficiency = 100.0 * speedup * ranks[0] / n;
      std::printf("| %d | %.2f s | %.2fx | %.0f%% |\n", n, t, speedup, efficiency);
      std::fflush(stdout);
      if (results) {
        table.rows.push_back({std::to_string(n), fixed(t, 3), fixed(speedup, 3), fixed(efficiency, 1)});
        results->write_table("scaling.csv", table);
      }
    } catch (const std::exception& e) {
      std::cerr << kScalingName << ": " << e.what() << '\n';
      return 1;
    }
  }
  std::printf(
      "time/epoch: median epoch_s scaled to the whole training split (%lld samples); speedup = t(%d) / t(n); "
      "efficiency = speedup * %d / n\n",
      split, ranks[0], ranks[0]);
  return 0;
}

}  // namespace lockstep::cli
