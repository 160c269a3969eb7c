// `lockstep bench peer`: `lockstep fit` next to the Python DDP peer (bench/peer/ddp_peer.py: PyTorch's
// DistributedDataParallel + DataLoader, the seeds' recipe), both with --nproc ranks, one after the other.
// The peer runs through `lockstep run` under the python3 whose torch is the LibTorch this lockstep was built
// against (found by CMake: /usr/bin/python3 with Debian's python3-torch, or the pip torch's interpreter).
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_commands.h"
#include "bench_metrics.h"
#include "bench_run_dir.h"
#include "bench_temp_dir.h"
#include "child_process.h"
#include "install_paths.h"

namespace lockstep::cli {
namespace {

constexpr const char* kPeerName = "lockstep bench peer";
constexpr const char* kPeerScript = "peer/ddp_peer.py";
constexpr const char* kPeerScriptEnv = "LOCKSTEP_PEER_SCRIPT";
constexpr const char* kPythonEnv = "LOCKSTEP_PEER_PYTHON";
constexpr const char* kDefaultPython = LOCKSTEP_PEER_PYTHON_DEFAULT;

constexpr const char* kPeerDescription =
    "`lockstep fit` next to the Python DDP peer, with the seeds' recipe on both sides: MLP\n"
    "784-256-128-10 (dropout 0.2), Adam lr 1e-3 constant, batch 64 per rank, Fashion-MNIST, --nproc\n"
    "ranks, --threads intra-op threads per rank. The peer (ddp_peer.py: PyTorch's\n"
    "DistributedDataParallel, DistributedSampler and DataLoader) runs first, under\n"
    "`lockstep run --nproc-per-node N --standalone -- PYTHON ddp_peer.py`, then\n"
    "`lockstep fit --devices N`. Prints both per-epoch training times (epoch_s: slowest rank,\n"
    "validation excluded) and validation accuracies as a markdown table, then the speed ratio =\n"
    "median peer epoch_s / median lockstep epoch_s (above 1: lockstep is faster) and the\n"
    "difference of the final accuracies. With --run-dir DIR the table is also written to\n"
    "DIR/peer.csv and the settings to DIR/hparams.yaml: `lockstep report DIR` shows them.";

constexpr const char* kPeerFooter =
    "PYTHON: " LOCKSTEP_PEER_PYTHON_DEFAULT
    ", the python3 with the torch lockstep was built\n"
    "against (LibTorch " LOCKSTEP_TORCH_VERSION_TEXT
    "), found when lockstep was configured.\n"
    "The peer script is share/lockstep/peer/ddp_peer.py next to lockstep (build tree) or under the\n"
    "install prefix. Environment: LOCKSTEP_PEER_SCRIPT overrides the script's path,\n"
    "LOCKSTEP_PEER_PYTHON the interpreter.\n"
    "\n"
    "Examples:\n"
    "  lockstep bench peer                   # 10 epochs, as in docs/benchmarks.md\n"
    "  lockstep bench peer --epochs 3 --limit-train-batches 200\n"
    "  lockstep bench peer --run-dir peer && lockstep report peer -o peer.html\n"
    "Exit status: 0 on success, 1 when a run fails, python3 cannot import torch or --run-dir\n"
    "cannot be written, 2 for bad flags.";

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

void print_file(const std::string& path, std::ostream& out) {
  std::ifstream in(path);
  out << in.rdbuf();
}

// Runs `command` with stdout to `out`; on failure prints the command, its status and its output.
bool run_logged(const std::vector<std::string>& command, const std::string& out) {
  const int status = run_child(command, {out, ""});
  if (status == 0) return true;
  std::cerr << kPeerName << ": `" << shell_line(command) << "` failed with exit status " << status
            << "; its output:\n";
  print_file(out, std::cerr);
  return false;
}

}  // namespace

int bench_peer_main(int argc, char** argv) {
  int nproc = 2;
  int epochs = 10;
  int threads = 1;
  int limit = 0;
  std::string data_dir;
  std::string run_dir;
  CLI::App app(kPeerDescription, kPeerName);
  app.footer(kPeerFooter);
  app.get_formatter()->column_width(34);
  app.add_option("--nproc", nproc, "Ranks (processes) on each side")->capture_default_str();
  app.add_option("--epochs", epochs, "Epochs on each side")->capture_default_str();
  app.add_option("--threads", threads, "Intra-op threads per rank")->capture_default_str();
  app.add_option("--limit-train-batches", limit, "Train at most N batches per rank and epoch\n(0: all)")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--data-dir", data_dir,
                 "Fashion-MNIST's IDX files. Default: both sides'\n/usr/share/datasets/fashion-mnist")
      ->type_name("DIR");
  app.add_option("--run-dir", run_dir, "Also write DIR/peer.csv and DIR/hparams.yaml\n(for lockstep report)")
      ->type_name("DIR");
  if (const int status = parse_bench_flags(app, argc, argv); status >= 0) return status;
  if (nproc < 1) return bench_usage_error(kPeerName, "--nproc must be >= 1, got " + std::to_string(nproc));
  if (epochs < 1) return bench_usage_error(kPeerName, "--epochs must be >= 1, got " + std::to_string(epochs));
  if (threads < 1)
    return bench_usage_error(kPeerName, "--threads must be >= 1, got " + std::to_string(threads));
  if (limit < 0)
    return bench_usage_error(kPeerName, "--limit-train-batches must be >= 0, got " + std::to_string(limit));
  if (const int status = refuse_inside_job(kPeerName); status != 0) return status;

  const std::string self = self_executable();
  const std::string script = find_data_file(kPeerScript, kPeerScriptEnv);
  if (const char* forced = nonempty_env(kPeerScriptEnv); forced != nullptr && ::access(forced, R_OK) != 0) {
    std::cerr << kPeerName << ": " << kPeerScriptEnv << "=" << forced << ": cannot read it ("
              << std::strerror(errno) << "); point it at bench/peer/ddp_peer.py of lockstep's sources\n";
    return 1;
  }
  if (script.empty()) {
    std::cerr
        << kPeerName << ": cannot find the Python peer share/lockstep/" << kPeerScript
        << " next to this executable or under its install prefix (it comes with -DLOCKSTEP_BUILD_BENCH=ON, "
           "the default); set "
        << kPeerScriptEnv << " to bench/peer/ddp_peer.py of lockstep's sources\n";
    return 1;
  }
  const char* forced_python = nonempty_env(kPythonEnv);
  const std::string python = forced_python != nullptr ? forced_python : kDefaultPython;

  try {
    const BenchTempDir tmp;
    // The peer needs PyTorch for this interpreter: say so plainly instead of a Python traceback per rank.
    const std::string import_err = tmp.file("import.err");
    const bool has_python = ::access(python.c_str(), X_OK) == 0;
    if (!has_python ||
        run_child({python, "-c", "import torch, torch.distributed"}, {"/dev/null", import_err}) != 0) {
      std::cerr << kPeerName << ": " << python << " cannot import torch ("
                << (has_python ? last_line(import_err) : "no such program")
                << "): install PyTorch " LOCKSTEP_TORCH_VERSION_TEXT
                   " for it (Debian's 1.13: apt-get install python3-torch, or scripts/install-deps.sh; 2.x: "
                   "pip install torch), or set "
                << kPythonEnv << " to a python3 that has it\n";
      return 1;
    }

    std::vector<std::string> common;
    if (limit > 0) common.insert(common.end(), {"--limit-train-batches", std::to_string(limit)});
    if (!data_dir.empty()) common.insert(common.end(), {"--data-dir", data_dir});

    // clang-format off
    std::vector<std::string> peer{self, "run", "--nproc-per-node", std::to_string(nproc), "--standalone", "--",
                                  python, script,
                                  "--epochs", std::to_string(epochs),
                                  "--threads", std::to_string(threads),
                                  "--batch-size", "64",
                                  "--lr", "1e-3"};
    // clang-format on
    peer.insert(peer.end(), common.begin(), common.end());
    const std::string peer_out = tmp.file("peer.txt");
    const std::string fit_metrics = tmp.file("fit.jsonl");
    // clang-format off
    std::vector<std::string> fit{self, "fit",
                                 "--devices", std::to_string(nproc),
                                 "--model", "mlp",
                                 "--optimizer", "adam",
                                 "--lr", "1e-3",
                                 "--batch-size", "64",
                                 "--lr-schedule", "constant",
                                 "--threads", std::to_string(threads),
                                 "--max-epochs", std::to_string(epochs),
                                 "--progress", "off",
                                 "--metrics-file", fit_metrics};
    // clang-format on
    fit.insert(fit.end(), common.begin(), common.end());

    std::unique_ptr<BenchRunDir> results;
    if (!run_dir.empty()) {
      Hparams settings{{"bench", "peer"},
                       {"nproc", std::to_string(nproc)},
                       {"epochs", std::to_string(epochs)},
                       {"threads", std::to_string(threads)},
                       {"limit_train_batches", std::to_string(limit)},
                       {"model", "mlp"},
                       {"optimizer", "adam"},
                       {"lr", "0.001"},
                       {"lr_schedule", "constant"},
                       {"batch_size", "64"},
                       {"python", python},
                       {"lockstep_version", LOCKSTEP_VERSION}};
      if (!data_dir.empty()) settings.emplace_back("data_dir", data_dir);
      results = std::make_unique<BenchRunDir>(run_dir, settings);
    }

    const std::string limit_text = limit > 0 ? ", " + std::to_string(limit) + " batches/rank/epoch" : "";
    std::printf(
        "Python DDP peer vs lockstep fit: MLP, adam 1e-3 constant, batch 64/rank, %d rank(s), %d "
        "thread(s)/rank, "
        "%d epoch(s)%s\n",
        nproc, threads, epochs, limit_text.c_str());
    std::vector<std::string> fit_shown(fit.begin(), fit.end());  // without the temporary metrics file
    for (size_t i = 0; i + 1 < fit_shown.size(); ++i) {
      if (fit_shown[i] == "--metrics-file") fit_shown.erase(fit_shown.begin() + i, fit_shown.begin() + i + 2);
    }
    std::printf("peer: %s\nlockstep: %s\n", shell_line(peer).c_str(), shell_line(fit_shown).c_str());
    std::fflush(stdout);
    if (!run_logged(peer, peer_out)) return 1;
    if (!run_logged(fit, tmp.file("fit.txt"))) return 1;

    const auto peer_records = read_jsonl(peer_out, "[rank 0] ");
    const auto fit_records = read_jsonl(fit_metrics);
    const auto check_count = [&](const std::vector<nlohmann::json>& records, const std::string& who,
                                 const std::string& output) {
      if (static_cast<int>(records.size()) == epochs) return true;
      std::cerr << kPeerName << ": " << who << " reported " << records.size() << " epoch(s), expected "
                << epochs << "; its output:\n";
      print_file(output, std::cerr);
      return false;
    };
    if (!check_count(peer_records, "the peer", peer_out) ||
        !check_count(fit_records, "lockstep fit", fit_metrics)) {
      return 1;
    }
    const auto peer_s = numeric_field(peer_records, "epoch_s", "the peer's output");
    const auto peer_acc = numeric_field(peer_records, "val_acc", "the peer's output");
    const auto fit_s = numeric_field(fit_records, "epoch_s", fit_metrics);
    const auto fit_acc = numeric_field(fit_records, "val_acc", fit_metrics);

    CsvTable table{{"epoch", "peer epoch_s", "peer val_acc", "lockstep epoch_s", "lockstep val_acc"}, {}};
    std::printf("| %s | %s | %s | %s | %s |\n|---|---|---|---|---|\n", table.header[0].c_str(),
                table.header[1].c_str(), table.header[2].c_str(), table.header[3].c_str(),
                table.header[4].c_str());
    for (int e = 0; e < epochs; ++e) {
      char cells[5][32];
      std::snprintf(cells[0], sizeof(cells[0]), "%d", e + 1);
      std::snprintf(cells[1], sizeof(cells[1]), "%.3f", peer_s[e]);
      std::snprintf(cells[2], sizeof(cells[2]), "%.4f", peer_acc[e]);
      std::snprintf(cells[3], sizeof(cells[3]), "%.3f", fit_s[e]);
      std::snprintf(cells[4], sizeof(cells[4]), "%.4f", fit_acc[e]);
      std::printf("| %s | %s | %s | %s | %s |\n", cells[0], cells[1], cells[2], cells[3], cells[4]);
      table.rows.push_back({cells[0], cells[1], cells[2], cells[3], cells[4]});
    }
    if (results) results->write_table("peer.csv", table);
    const double peer_median = median(peer_s);
    const double fit_median = median(fit_s);
    const bool full = limit == 0;
    std::printf("median epoch_s: peer %.3f s, lockstep %.3f s; speed ratio peer/lockstep = %.2fx%s\n",
                peer_median, fit_median, peer_median / fit_median, full ? " (goal >= 4x)" : "");
    std::printf("final val_acc after %d epoch(s): peer %.4f, lockstep %.4f, |diff| = %.4f%s\n", epochs,
                peer_acc.back(), fit_acc.back(), std::fabs(peer_acc.back() - fit_acc.back()),
                full ? " (goal <= 0.005)" : "");
    return 0;
  } catch (const std::exception& e) {
    std::cerr << kPeerName << ": " << e.what() << '\n';
    return 1;
  }
}

}  // namespace lockstep::cli
