#include "bench_temp_dir.h"

#include <ftw.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace lockstep::cli {

BenchTempDir::BenchTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/lockstep-bench-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary directory " + pattern + ": " + std::strerror(errno));
  }
  path_ = pattern;
}

// rm -r with nftw: PyPI's libtorch.so (2.11) exports a copy of std::filesystem::remove_all that crashes
// when a binary linked against it binds to it (docs/gpu.md).
BenchTempDir::~BenchTempDir() {
  ::nftw(
      path_.c_str(), [](const char* name, const struct stat*, int, struct FTW*) { return ::remove(name); },
      16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace lockstep::cli
