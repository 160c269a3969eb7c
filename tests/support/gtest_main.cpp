// lockstep's GoogleTest main: GoogleTest's own, plus what ctest needs to name each case.
// Under ctest (cmake/LockstepTargets.cmake) a binary runs once and LOCKSTEP_CASE_LOG names a file where this
// main writes one line per case as it starts and ends (tab-separated: start|pass|fail|skip, the case, and
// the skip's reason or a failure's note); each case is its own ctest entry that reads its lines
// (tests/support/gtest_case.sh): a failure, a skip, or a crash names the case. The binary then exits 0
// when every case ran to its end, pass or fail: the cases' entries carry the verdicts.
// Run by hand (no LOCKSTEP_CASE_LOG), a binary with a skipped test and no failure prints one line per
// skipped test,
//   lockstep-skip: Suite.Name: the reason
// and exits 77, the SKIP_RETURN_CODE of every lockstep test (mpirun's runs of a binary use this).
// A test that crashes (SIGSEGV, SIGBUS) prints its name and the stack before the process dies of the
// signal as before: on the GPU machine a crash is otherwise all a run brings back.
#include <execinfo.h>
#include <ucontext.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
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

// One case's name, as ctest's entries name it: Suite.Name (Prefix/Suite.Name/0 for parameterised ones).
std::string case_name(const testing::TestInfo& test) {
  return std::string(test.test_suite_name()) + "." + test.name();
}

// A line's field without tabs or newlines (a failure's message may hold both).
std::string one_field(std::string text) {
  for (char& c : text) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

// Follows each case: names the running one for the crash handler, collects "Suite.Name: reason" for every
// skipped one, and, given a LOCKSTEP_CASE_LOG path, writes each case's lines there as they happen (flushed:
// a crash or a hang, the binary killed at its ctest TIMEOUT, leaves a "start" without an end).
class CaseRecorder : public testing::EmptyTestEventListener {
 public:
  explicit CaseRecorder(const std::string& log_path) {
    if (log_path.empty()) return;
    log_.open(log_path, std::ios::trunc);
    if (!log_) {
      std::fprintf(stderr, "gtest_main: cannot write LOCKSTEP_CASE_LOG=%s\n", log_path.c_str());
      std::exit(1);
    }
  }
  void OnTestStart(const testing::TestInfo& test) override {
    std::snprintf(running_test, sizeof running_test, "%s", case_name(test).c_str());
    write("start", case_name(test));
  }
  void OnTestPartResult(const testing::TestPartResult& part) override {
    if (part.skipped()) {
      reason_ = part.message();
    } else if (part.failed()) {
      const std::string where = part.file_name() == nullptr ? std::string("(unknown file)")
                                                            : std::string(part.file_name()) + ":" +
                                                                  std::to_string(part.line_number());
      notes_.push_back(where + ": " + part.message());
    }
  }
  void OnTestEnd(const testing::TestInfo& test) override {
    const std::string name = case_name(test);
    for (const std::string& note : notes_) write("note", name, note);
    if (test.result()->Skipped()) {
      const std::string reason = reason_.empty() ? "(no reason given)" : reason_;
      skipped_.push_back(name + ": " + reason);
      write("skip", name, reason);
    } else {
      write(test.result()->Failed() ? "fail" : "pass", name);
    }
    notes_.clear();
    reason_.clear();
  }
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  void write(const char* what, const std::string& name, const std::string& text = "") {
    if (!log_.is_open()) return;
    log_ << what << '\t' << name;
    if (!text.empty()) log_ << '\t' << one_field(text);
    log_ << std::endl;
  }

  std::ofstream log_;
  std::string reason_;
  std::vector<std::string> notes_;
  std::vector<std::string> skipped_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  install_crash_handler();
  // Read once and unset: a death test's child (which runs this main again) and any process a test starts
  // must not truncate or write the log.
  const char* from_env = std::getenv("LOCKSTEP_CASE_LOG");
  const std::string case_log = from_env == nullptr ? "" : from_env;
  ::unsetenv("LOCKSTEP_CASE_LOG");
  auto* recorder = new CaseRecorder(case_log);  // owned by GoogleTest's listener list
  testing::UnitTest::GetInstance()->listeners().Append(recorder);
  const int status = RUN_ALL_TESTS();
  if (!case_log.empty()) return 0;  // every case ended; their entries judge them
  for (const std::string& line : recorder->skipped()) std::printf("lockstep-skip: %s\n", line.c_str());
  std::fflush(stdout);
  if (status != 0) return status;
  return recorder->skipped().empty() ? 0 : kSkipReturnCode;
}
