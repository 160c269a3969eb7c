// libFuzzer's entry points for one executable's targets: LOCKSTEP_FUZZ_TARGET names the target.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_target.h"

namespace {
const lockstep::fuzz::Target* target = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const char* name = std::getenv("LOCKSTEP_FUZZ_TARGET");
  target = lockstep::fuzz::find_target(name != nullptr ? name : "");
  if (target == nullptr) {
    std::fprintf(stderr, "set LOCKSTEP_FUZZ_TARGET to one of this executable's targets:");
    for (size_t i = 0; i < lockstep::fuzz::kTargetCount; ++i) {
      std::fprintf(stderr, " %s", lockstep::fuzz::kTargets[i].name);
    }
    std::fprintf(stderr, "\n");
    std::exit(2);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  target->run(data, size);
  return 0;
}
