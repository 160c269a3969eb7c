#pragma once

// lockstep's fuzz targets: each parser of bytes from outside has a named target; one executable holds the
// targets of a group (parsers_targets.cpp: LibTorch-free; files_targets.cpp: the file formats read through
// LibTorch) and runs one of them, chosen by name: under libFuzzer from LOCKSTEP_FUZZ_TARGET
// (libfuzzer_main.cpp; scripts/fuzz.sh sets it), in the replay tests from the first argument
// (replay_main.cpp). docs/reliability.md, "Fuzzing", has each target's figures.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace lockstep::fuzz {

/// Parses `data` the way the target's parser reads bytes from outside. Expected errors (the parser's
/// exceptions, see expect_named_error) are caught inside; a crash, a sanitizer finding, a hang or an
/// error that does not name its source is the finding.
using TargetFn = void (*)(const uint8_t* data, size_t size);

struct Target {
  const char* name;
  TargetFn run;
};

/// This executable's targets (defined by its *_targets.cpp).
extern const Target kTargets[];
extern const size_t kTargetCount;

/// The target named `name`, or nullptr.
inline const Target* find_target(const std::string& name) {
  for (size_t i = 0; i < kTargetCount; ++i) {
    if (name == kTargets[i].name) return &kTargets[i];
  }
  return nullptr;
}

/// A file of this process under /dev/shm (else $TMPDIR) holding `data`, for parsers that read paths;
/// `name` tells files of one input apart. The same path for every input: it is overwritten.
std::string write_input_file(const std::string& name, const uint8_t* data, size_t size);

/// Prints the error that named none of `sources` and aborts: the finding expect_named_error reports.
[[noreturn]] void unnamed_error(const std::string& sources, const std::string& what);

/// Runs `parse()`. Every lockstep parser's error for bad bytes names where they came from (the file, the
/// variable, the record), so an exception whose message holds one of `sources` is the parser's answer; any
/// other is a finding: a library's own exception escaping (yaml-cpp's "bad conversion", nlohmann's
/// out_of_range) with nothing to tell the user which file is bad.
template <class Parse>
void expect_named_error(const std::vector<std::string>& sources, Parse&& parse) {
  try {
    parse();
  } catch (const std::exception& e) {
    const std::string what = e.what();
    std::string names;
    for (const std::string& source : sources) {
      if (what.find(source) != std::string::npos) return;
      names += (names.empty() ? "'" : ", '") + source + "'";
    }
    unnamed_error(names, what);
  }
}

}  // namespace lockstep::fuzz
