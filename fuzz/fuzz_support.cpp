#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "fuzz_target.h"

namespace lockstep::fuzz {

std::string write_input_file(const std::string& name, const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (tmp != nullptr ? tmp : "/tmp");
    base += "/lockstep-fuzz-" + std::to_string(::getpid());
    ::mkdir(base.c_str(), 0700);
    return base;
  }();
  std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("fuzz: cannot write " + path);
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

void unnamed_error(const std::string& sources, const std::string& what) {
  std::fprintf(stderr, "fuzz: an error that names none of %s: %s\n", sources.c_str(), what.c_str());
  std::abort();
}

}  // namespace lockstep::fuzz
