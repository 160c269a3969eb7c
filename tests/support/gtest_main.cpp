// lockstep's GoogleTest main: GoogleTest's own, plus what ctest needs to see a skip. Each binary is one
// ctest (cmake/LockstepTargets.cmake), where a GTEST_SKIP would otherwise show as "Passed" with its reason
// hidden. So a binary with a skipped test and no failure prints one line per skipped test,
//   lockstep-skip: Suite.Name: the reason
// and exits 77, the SKIP_RETURN_CODE of every lockstep test: ctest lists it under "did not run", and
// scripts/check-skips.sh (run by .ci/run) fails CI unless tests/allowed-skips.txt allows that skip.
// A test that crashes (SIGSEGV, SIGBUS) prints its name and the stack before the process dies of the
// signal as before: on the GPU machine a crash is otherwise all a run brings back.
#include <execinfo.h>
#include <ucontext.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

constexpr int kSkipReturnCode = 77;

char running_test[512] = "(before the first test)";

void write_text(const char* text) {
  (void)!::write(STDERR_FILENO, text, std::strlen(text));
}

// Async-signal-safe as far as it goes: write(2) and backtrace_symbols_fd (backtrace() was called once at
// start, so that it does not load libgcc inside the handler). A call through a bad pointer leaves the
// unwinder nothing to walk, so on x86-64 the faulting instruction and the return address on top of the
// stack (the caller of such a call) come first. SA_RESETHAND: the raise ends the process.
void print_crash(int signal, siginfo_t* info, void* context) {
  write_text(signal == SIGSEGV ? "\n*** SIGSEGV in test " : "\n*** SIGBUS in test ");
  write_text(running_test);
#if defined(__x86_64__)
  const auto* registers = static_cast<ucontext_t*>(context)->uc_mcontext.gregs;
  void* where[2] = {reinterpret_cast<void*>(registers[REG_RIP]),
                    *reinterpret_cast<void**>(registers[REG_RSP])};
  write_text(info->si_addr == where[0] ? "; jumped to a bad address; at, and caller if a call:\n"
                                       : "; faulting instruction, and caller if a leaf:\n");
  ::backtrace_symbols_fd(where, 2, STDERR_FILENO);
#else
  (void)info;
  (void)context;
#endif
  write_text("stack:\n");
  void* frames[64];
  ::backtrace_symbols_fd(frames, ::backtrace(frames, 64), STDERR_FILENO);
  std::raise(signal);
}

void install_crash_handler() {
  void* warm[1];
  ::backtrace(warm, 1);
  struct sigaction action {};
  action.sa_sigaction = print_crash;
  action.sa_flags = SA_RESETHAND | SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGSEGV, &action, nullptr);
  ::sigaction(SIGBUS, &action, nullptr);
}

// Collects "Suite.Name: reason" for every skipped test.
class SkipCollector : public testing::EmptyTestEventListener {
 public:
  void OnTestStart(const testing::TestInfo& test) override {
    std::snprintf(running_test, sizeof running_test, "%s.%s", test.test_suite_name(), test.name());
  }
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
  install_crash_handler();
  auto* collector = new SkipCollector;  // owned by GoogleTest's listener list
  testing::UnitTest::GetInstance()->listeners().Append(collector);
  const int status = RUN_ALL_TESTS();
  for (const std::string& line : collector->skipped()) std::printf("lockstep-skip: %s\n", line.c_str());
  std::fflush(stdout);
  if (status != 0) return status;
  return collector->skipped().empty() ? 0 : kSkipReturnCode;
}
