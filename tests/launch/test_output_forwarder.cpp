#include "lockstep/launch/detail/output_forwarder.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>
#include <string>

#include "launch_test_util.h"

namespace lockstep::launch::detail {
namespace {

using testing::read_file;
using testing::TempDir;

TEST(RankPrefix, NamesTheGlobalRank) {
  EXPECT_EQ(rank_prefix(0), "[rank 0] ");
  EXPECT_EQ(rank_prefix(12), "[rank 12] ");
}

TEST(OutputForwarder, PrefixesEachCompleteLine) {
  std::ostringstream sink;
  OutputForwarder f(/*rank=*/3, sink);
  f.feed("hello\nwor");
  EXPECT_EQ(sink.str(), "[rank 3] hello\n");
  f.feed("ld\n");
  EXPECT_EQ(sink.str(), "[rank 3] hello\n[rank 3] world\n");
}

TEST(OutputForwarder, FinishFlushesAPartialLineWithANewline) {
  std::ostringstream sink;
  OutputForwarder f(/*rank=*/0, sink);
  f.feed("no newline");
  EXPECT_EQ(sink.str(), "");
  f.finish();
  EXPECT_EQ(sink.str(), "[rank 0] no newline\n");
}

TEST(OutputForwarder, KeepsTheLastLinesAsTail) {
  std::ostringstream sink;
  OutputForwarder f(/*rank=*/1, sink, /*log_fd=*/-1, /*tail_lines=*/3);
  for (int i = 0; i < 10; ++i) f.feed("line " + std::to_string(i) + "\n");
  ASSERT_EQ(f.tail().size(), 3u);
  EXPECT_EQ(f.tail()[0], "line 7");
  EXPECT_EQ(f.tail()[2], "line 9");
}

TEST(OutputForwarder, DefaultTailIsTwentyLines) {
  std::ostringstream sink;
  OutputForwarder f(/*rank=*/1, sink);
  for (int i = 0; i < 50; ++i) f.feed("x\n");
  EXPECT_EQ(f.tail().size(), 20u);
}

TEST(OutputForwarder, WritesRawBytesToTheLogFile) {
  TempDir dir;
  const std::string path = dir / "log";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  std::ostringstream sink;
  {
    OutputForwarder f(/*rank=*/2, sink, fd);
    f.feed("a\nb");
    f.feed("c\n");
    f.finish();
  }
  ::close(fd);
  EXPECT_EQ(read_file(path), "a\nbc\n");
  EXPECT_EQ(sink.str(), "[rank 2] a\n[rank 2] bc\n");
}

}  // namespace
}  // namespace lockstep::launch::detail
