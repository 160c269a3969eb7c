// `lockstep export`: checks the arguments, then becomes the program `lockstep-export` (exec), which loads
// LibTorch to read the archive. The CLI itself stays free of LibTorch (see CMakeLists.txt), so --help and
// usage errors answer at once.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "export_flags.h"
#include "install_paths.h"

namespace lockstep::cli {

int export_main(int argc, char** argv) {
  ExportFlags flags;
  if (const int status = parse_export_flags(argc, argv, flags); status >= 0) return status;

  const std::string program = find_helper_program("lockstep-export", "LOCKSTEP_EXPORT_PROGRAM");
  if (program.empty()) {
    std::cerr << "lockstep export: cannot find the program 'lockstep-export' next to this executable or in "
                 "../libexec/lockstep/ (reinstall lockstep, or set LOCKSTEP_EXPORT_PROGRAM to its path)\n";
    return 127;
  }
  std::vector<std::string> command{program};
  for (int i = 1; i < argc; ++i) command.emplace_back(argv[i]);
  std::vector<char*> args;
  for (std::string& arg : command) args.push_back(arg.data());
  args.push_back(nullptr);
  ::execv(program.c_str(), args.data());
  std::cerr << "lockstep export: cannot execute '" << program << "': " << std::strerror(errno) << '\n';
  return 126;
}

}  // namespace lockstep::cli
