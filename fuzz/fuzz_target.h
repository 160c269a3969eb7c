#pragma once

// lockstep's fuzz targets: each parser of bytes from outside has a named target; one executable holds the
// targets of a group (parsers_targets.cpp: LibTorch-free; files_targets.cpp: the file formats read through
// LibTorch) and runs one of them, chosen by name: under libFuzzer from LOCKSTEP_FUZZ_TARGET
// (libfuzzer_main.cpp; scripts/fuzz.sh sets it), in the replay tests from the first argument
// (replay_main.cpp). docs/reliability.md, "Fuzzing", has each target's figures.

#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep::fuzz {

/// Parses `data` the way the target's parser reads bytes from outside. Expected errors (the parser's
/// exceptions) are caught inside; a crash, a sanitizer finding or a hang is the finding.
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

}  // namespace lockstep::fuzz
