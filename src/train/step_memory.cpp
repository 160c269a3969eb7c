#include "lockstep/train/step_memory.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace lockstep::train {

bool keep_step_memory_in_heap() {
  // The user's own settings win: glibc's tunables, and its older MALLOC_*_ variables for the same two.
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return false;
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr) {
    return false;
  }
  constexpr int kMmapThreshold = 32 * 1024 * 1024;  // glibc's HEAP_MAX / 2 on 64-bit: larger is refused
  constexpr int kTrimThreshold = 256 * 1024 * 1024;
  return mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
}

}  // namespace lockstep::train
