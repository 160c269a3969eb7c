#include "install_paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace lockstep::cli {
namespace {

namespace fs = std::filesystem;

}  // namespace

const char* nonempty_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

std::string self_executable() {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  return error ? std::string() : self.string();
}

std::string find_helper_program(const std::string& name, const char* env_var) {
  if (const char* forced = nonempty_env(env_var)) return forced;
  const fs::path self = self_executable();
  if (self.empty()) return "";
  for (const fs::path& candidate :
       {self.parent_path() / name, self.parent_path().parent_path() / "libexec" / "lockstep" / name}) {
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

std::string find_data_file(const std::string& relative, const char* env_var) {
  if (const char* forced = nonempty_env(env_var)) return forced;
  const fs::path self = self_executable();
  if (self.empty()) return "";
  for (const fs::path& candidate : {self.parent_path() / "share" / "lockstep" / relative,
                                    self.parent_path().parent_path() / "share" / "lockstep" / relative}) {
    if (::access(candidate.c_str(), R_OK) == 0) return candidate.string();
  }
  return "";
}

}  // namespace lockstep::cli
