// keep_step_memory_in_heap: after it, a step-sized block (8 MiB) comes from the heap, not a fresh mmap,
// and a user's own glibc.malloc tunables make it change nothing.
#include <malloc.h>

#include <cstdlib>

#include <gtest/gtest.h>

#include "lockstep/train/step_memory.h"

namespace {

constexpr size_t kStepBlock = 8 * 1024 * 1024;

// Bytes that an allocation of kStepBlock adds to glibc's mmapped total while it is held.
size_t mmapped_by_step_block() {
  const size_t before = mallinfo2().hblkhd;
  void* block = std::malloc(kStepBlock);
  static_cast<volatile char*>(block)[0] = 1;  // used, so the allocation cannot be elided
  const size_t during = mallinfo2().hblkhd;
  std::free(block);
  return during - before;
}

}  // namespace

TEST(StepMemoryTest, UserTunablesWinAndNothingChanges) {
  ASSERT_EQ(setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=131072", 1), 0);
  EXPECT_FALSE(lockstep::train::keep_step_memory_in_heap());
  ASSERT_EQ(unsetenv("GLIBC_TUNABLES"), 0);
  ASSERT_EQ(setenv("MALLOC_TRIM_THRESHOLD_", "1048576", 1), 0);
  EXPECT_FALSE(lockstep::train::keep_step_memory_in_heap());
  ASSERT_EQ(unsetenv("MALLOC_TRIM_THRESHOLD_"), 0);
}

TEST(StepMemoryTest, StepSizedBlocksComeFromTheHeap) {
  // Control: at glibc's initial threshold (128 KiB, fixed by this call), the block is a fresh mapping.
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
  ASSERT_GE(mmapped_by_step_block(), kStepBlock);
  ASSERT_EQ(unsetenv("GLIBC_TUNABLES"), 0);
  EXPECT_TRUE(lockstep::train::keep_step_memory_in_heap());
  EXPECT_EQ(mmapped_by_step_block(), 0u);
}
