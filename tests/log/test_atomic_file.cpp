// lockstep::detail::write_atomically / write_file_atomically (lockstep/detail/atomic_file.h), the one atomic
// writer of every layer: a reader sees the old file or the whole new one, and a failed write leaves the old
// file and no temporary file behind.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lockstep/detail/atomic_file.h"

namespace {

namespace fs = std::filesystem;
using lockstep::detail::write_atomically;
using lockstep::detail::write_file_atomically;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "lockstep-atomic-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

// A process killed while writing leaves ".NAME.tmp.PID.N": removed once that process is gone (the Trainer
// does it for its ckpt_dir at start), kept while it lives; other files stay.
TEST(AtomicFile, OrphanedTemporariesOfDeadProcessesAreRemoved) {
  const TempDir dir;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // reaped: its pid names no process now
  const std::string dead = ".last.ckpt.tmp." + std::to_string(child) + ".7";
  const std::string dead_old_style = ".last.ckpt.tmp." + std::to_string(child);
  const std::string live = ".last.ckpt.tmp." + std::to_string(::getpid()) + ".0";
  for (const std::string& name :
       {dead, dead_old_style, live, std::string("last.ckpt"), std::string(".tmp.notes")})
    std::ofstream(dir / name) << "x";
  lockstep::detail::remove_orphaned_temporaries(dir.path().string());
  EXPECT_EQ(names_in(dir.path()), (std::set<std::string>{live, "last.ckpt", ".tmp.notes"}));
}

TEST(AtomicFile, WritesAndReplacesTheWholeFile) {
  TempDir dir;
  const std::string path = (dir / "metrics.csv").string();
  write_file_atomically(path, "a,b\n1,2\n");
  EXPECT_EQ(read_file(path), "a,b\n1,2\n");
  write_file_atomically(path, "x\n");
  EXPECT_EQ(read_file(path), "x\n");
  write_file_atomically(path, "");
  EXPECT_EQ(read_file(path), "");
  EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"metrics.csv"});
}

TEST(AtomicFile, ARelativePathIsWrittenInTheCurrentDirectory) {
  TempDir dir;
  const fs::path before = fs::current_path();
  fs::current_path(dir.path());
  write_file_atomically("plain.txt", "text");
  fs::current_path(before);
  EXPECT_EQ(read_file(dir / "plain.txt"), "text");
  EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"plain.txt"});
}

TEST(AtomicFile, TheWriterGetsAnEmptyTemporaryFileBesideTheTarget) {
  TempDir dir;
  const fs::path target = dir / "final.pt";
  write_atomically(target.string(), [&](const std::string& tmp) {
    EXPECT_EQ(fs::path(tmp).parent_path(), dir.path());
    EXPECT_EQ(fs::path(tmp).filename().string().rfind(".final.pt.tmp.", 0), 0U) << tmp;
    EXPECT_TRUE(fs::exists(tmp));
    EXPECT_EQ(fs::file_size(tmp), 0U);
    EXPECT_FALSE(fs::exists(target));  // nothing under the final name until the rename
    std::ofstream(tmp) << "weights";
  });
  EXPECT_EQ(read_file(target), "weights");
}

TEST(AtomicFile, AFailingWriterLeavesTheOldFileAndNothingElse) {
  TempDir dir;
  const std::string path = (dir / "last.ckpt").string();
  write_file_atomically(path, "old");
  try {
    write_atomically(path, [](const std::string& tmp) {
      std::ofstream(tmp) << "half";
      throw std::runtime_error("disk full");
    });
    FAIL() << "the writer's exception was swallowed";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "disk full");  // passes on unchanged
  }
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"last.ckpt"});
}

TEST(AtomicFile, AMissingDirectoryIsNamedAndNothingIsCreated) {
  TempDir dir;
  const std::string path = (dir / "missing" / "trace.json").string();
  try {
    write_file_atomically(path, "{}");
    FAIL() << "wrote into a missing directory";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("cannot write '" + path + "': ", 0), 0U) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(AtomicFile, ATargetThatIsADirectoryFailsAndLeavesNoTemporaryFile) {
  TempDir dir;
  fs::create_directory(dir / "out");
  try {
    write_file_atomically((dir / "out").string(), "<html>");
    FAIL() << "replaced a directory";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((dir / "out").string()), std::string::npos) << what;
    EXPECT_NE(what.find("Is a directory"), std::string::npos) << what;
  }
  EXPECT_TRUE(fs::is_directory(dir / "out"));
  EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"out"});
}

TEST(AtomicFile, ConcurrentWritersOfOnePathEachWriteWholeFiles) {
  TempDir dir;
  const std::string path = (dir / "shared.txt").string();
  std::vector<std::string> contents;
  for (int i = 0; i < 8; ++i) contents.push_back(std::string(10000 + i, static_cast<char>('a' + i)));
  std::vector<std::thread> writers;
  for (const std::string& content : contents) {
    writers.emplace_back([&path, &content] {
      for (int round = 0; round < 20; ++round) write_file_atomically(path, content);
    });
  }
  for (auto& writer : writers) writer.join();
  const std::string final_content = read_file(path);
  EXPECT_NE(std::find(contents.begin(), contents.end(), final_content), contents.end());
  EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"shared.txt"});
}

}  // namespace
