// lockstep's GoogleTest main: GoogleTest's own, plus what ctest needs to see a skip. Each binary is one
// ctest (cmake/LockstepTargets.cmake), where a GTEST_SKIP would otherwise show as "Passed" with its reason
// hidden. So a binary with a skipped test and no failure prints one line per skipped test,
//   lockstep-skip: Suite.Name: the reason
// and exits 77, the SKIP_RETURN_CODE of every lockstep test: ctest lists it under "did not run", and
// scripts/check-skips.sh (run by .ci/run) fails CI unless tests/allowed-skips.txt allows that skip.
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

constexpr int kSkipReturnCode = 77;

// Collects "Suite.Name: reason" for every skipped test.
class SkipCollector : public testing::EmptyTestEventListener {
 public:
  void OnTestPartResult(const testing::TestPartResult& part) override {
    if (part.skipped()) reason_ = part.message();
  }
  void OnTestEnd(const testing::TestInfo& test) override {
    if (test.result()->Skipped()) {
      skipped_.push_back(std::string(test.test_suite_name()) + "." + test.name() + ": " +
                         (reason_.empty() ? "(no reason given)" : reason_));
    }
    reason_.clear();
  }
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  std::string reason_;
  std::vector<std::string> skipped_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  auto* collector = new SkipCollector;  // owned by GoogleTest's listener list
  testing::UnitTest::GetInstance()->listeners().Append(collector);
  const int status = RUN_ALL_TESTS();
  for (const std::string& line : collector->skipped()) std::printf("lockstep-skip: %s\n", line.c_str());
  std::fflush(stdout);
  if (status != 0) return status;
  return collector->skipped().empty() ? 0 : kSkipReturnCode;
}
