// A benchmark's results as a run dir (bench_run_dir.h).
#include "bench_run_dir.h"

#include <stdexcept>
#include <system_error>

#include "lockstep/detail/atomic_file.h"
#include "lockstep/log/hparams_yaml.h"

namespace lockstep::cli {

BenchRunDir::BenchRunDir(std::filesystem::path dir, const Hparams& settings) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_)) {
    throw std::runtime_error("--run-dir '" + dir_.string() + "': cannot create the directory (" +
                             (ec ? ec.message() : std::string("a file of that name exists")) +
                             "); choose a writable path");
  }
  log::write_hparams_yaml(dir_.string(), settings);
}

void BenchRunDir::write_table(const std::string& name, const CsvTable& table) const {
  lockstep::detail::write_file_atomically((dir_ / name).string(), format_csv(table));
}

}  // namespace lockstep::cli
