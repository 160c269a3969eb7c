// Replays inputs through one target without libFuzzer (the ctest fuzz_replay_* tests, in every build):
//   fuzz_replay_GROUP TARGET DIR|FILE...
// Every file of each directory (a corpus, the regressions kept from findings) runs once; a crash, a
// sanitizer finding or a hang fails the test. Prints how many inputs ran; none at all is an error.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_target.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TARGET DIR|FILE...\n", argv[0]);
    return 2;
  }
  const lockstep::fuzz::Target* target = lockstep::fuzz::find_target(argv[1]);
  if (target == nullptr) {
    std::fprintf(stderr, "%s: no target '%s'\n", argv[0], argv[1]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    std::error_code ec;
    if (fs::is_directory(argv[i], ec)) {
      for (const auto& entry : fs::directory_iterator(argv[i])) {
        // (A dot file keeps an empty directory in git: not an input.)
        if (entry.is_regular_file() && entry.path().filename().string()[0] != '.')
          files.push_back(entry.path());
      }
    } else if (fs::is_regular_file(argv[i], ec)) {
      files.emplace_back(argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "%s %s: no input found in the given paths\n", argv[0], argv[1]);
    return 1;
  }
  std::fprintf(stderr, "%s: replaying %zu input(s)\n", argv[1], files.size());
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    target->run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%s: %zu input(s) replayed without a finding\n", argv[1], files.size());
  return 0;
}
