// `lockstep slurm`: writes the sbatch script of slurm_script.h to stdout or to -o FILE (executable).
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "commands.h"
#include "slurm_script.h"

namespace lockstep::cli {

int slurm_main(int argc, char** argv) {
  SlurmScriptOptions options;
  std::string output_file;
  if (const int status = parse_slurm_flags(argc, argv, options, output_file); status >= 0) return status;
  const std::string script = slurm_script(options);  // validated by parse_slurm_flags
  if (output_file.empty()) {
    std::cout << script;
    return 0;
  }
  std::ofstream out(output_file, std::ios::trunc);
  out << script;
  out.close();
  if (!out) {
    std::cerr << "lockstep slurm: cannot write '" << output_file << "': " << std::strerror(errno)
              << " (check that its directory exists and is writable)\n";
    return 1;
  }
  ::chmod(output_file.c_str(), 0755);
  std::cerr << "lockstep slurm: wrote " << output_file << " (" << to_string(options.style) << ", "
            << options.nodes << " node(s) x " << options.ranks_per_node()
            << " rank(s)); submit it with: sbatch " << output_file << "\n";
  return 0;
}

}  // namespace lockstep::cli
