// `lockstep report RUN_DIR -o report.html`: a run's metrics, breakdown, benchmarks and configuration as one
// self-contained HTML page (the page: report_page.h; the files it reads: report_run.h).
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli_parse.h"
#include "commands.h"
#include "report_page.h"
#include "report_run.h"

namespace lockstep::cli {
namespace {

constexpr const char* kName = "lockstep report";

constexpr const char* kDescription =
    "Writes one self-contained HTML page (inline SVG charts, no script, nothing loaded from the\n"
    "network) for a run: loss curves, validation accuracy, learning rate, throughput and time per\n"
    "epoch, memory, the per-rank step breakdown of the last epoch as stacked bars (with the slowest\n"
    "rank by busy time, flagged above 20% over the other ranks' median), a chart for every other\n"
    "key logged, the tables of `lockstep bench scaling`/`peer --run-dir` with their charts, and\n"
    "hparams.yaml.";

constexpr const char* kFooter =
    "RUN_DIR is a version dir (it holds metrics.csv or metrics.jsonl), the --run-dir of a bench\n"
    "(scaling.csv, peer.csv), or a root dir: then its newest lightning_logs/version_N is used.\n"
    "metrics.csv (Lightning's CSVLogger format) is read, else metrics.jsonl. The page is written to a\n"
    "temporary file next to -o and renamed, so no half-written report stays behind.\n"
    "\n"
    "Examples:\n"
    "  lockstep report lightning_logs/version_0 -o report.html\n"
    "  lockstep report .                         # the newest run under ./lightning_logs\n"
    "  lockstep bench scaling --run-dir scaling && lockstep report scaling -o scaling.html\n"
    "Exit status: 0 on success, 1 when the run cannot be read or the page cannot be written, 2 for\n"
    "bad flags.";

int usage_error(const std::string& message) {
  std::cerr << kName << ": " << message << "\nRun '" << kName << " --help' for the flags.\n";
  return 2;
}

}  // namespace

int report_main(int argc, char** argv) {
  std::string run_dir;
  std::string output;
  CLI::App app(kDescription, kName);
  app.footer(kFooter);
  app.get_formatter()->column_width(30);
  app.add_option("RUN_DIR", run_dir, "The run's directory (see below)")->required();
  app.add_option("-o,--output", output, "The HTML file to write. Default:\nRUN_DIR/report.html")
      ->type_name("FILE");
  if (const int status = parse_or_status(app, argc, argv, usage_error); status >= 0) return status;
  try {
    const RunFiles files = find_run_files(run_dir);
    const RunData run = load_run(files, run_dir);
    const std::filesystem::path path =
        output.empty() ? std::filesystem::path(run_dir) / "report.html" : std::filesystem::path(output);
    write_report(path, render_report(run));
    std::cout << "wrote " << path.string() << " (from " << files.dir.string() << ")\n";
    return 0;
  } catch (const ReportError& e) {
    std::cerr << kName << ": " << e.what() << '\n';
    return 1;
  }
}

}  // namespace lockstep::cli
