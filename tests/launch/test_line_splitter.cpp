#include "lockstep/launch/detail/line_splitter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lockstep::launch::detail {
namespace {

struct Collector {
  std::vector<std::string> lines;
  LineSplitter::LineCallback callback() {
    return [this](std::string_view line) { lines.emplace_back(line); };
  }
};

TEST(LineSplitter, SplitsCompleteLinesInOneChunk) {
  LineSplitter s;
  Collector c;
  s.feed("a\nbb\n\nccc\n", c.callback());
  EXPECT_EQ(c.lines, (std::vector<std::string>{"a", "bb", "", "ccc"}));
  EXPECT_EQ(s.pending(), 0u);
}

TEST(LineSplitter, JoinsALineSpreadOverChunks) {
  LineSplitter s;
  Collector c;
  s.feed("hel", c.callback());
  EXPECT_TRUE(c.lines.empty());
  EXPECT_EQ(s.pending(), 3u);
  s.feed("lo wo", c.callback());
  s.feed("rld\nnext", c.callback());
  EXPECT_EQ(c.lines, (std::vector<std::string>{"hello world"}));
  EXPECT_EQ(s.pending(), 4u);
}

TEST(LineSplitter, FinishHandsOverTheLastLineWithoutNewline) {
  LineSplitter s;
  Collector c;
  s.feed("one\ntwo", c.callback());
  s.finish(c.callback());
  EXPECT_EQ(c.lines, (std::vector<std::string>{"one", "two"}));
  s.finish(c.callback());  // nothing left: no empty line
  EXPECT_EQ(c.lines.size(), 2u);
}

TEST(LineSplitter, ByteByByteGivesTheSameLines) {
  const std::string text = "alpha\nbeta gamma\n\ndelta\n";
  LineSplitter s;
  Collector c;
  for (char ch : text) s.feed(std::string_view(&ch, 1), c.callback());
  EXPECT_EQ(c.lines, (std::vector<std::string>{"alpha", "beta gamma", "", "delta"}));
}

TEST(LineSplitter, CutsOverlongLinesIntoPieces) {
  LineSplitter s(/*max_line_bytes=*/4);
  Collector c;
  s.feed("abcdefghij\nxy\n", c.callback());
  EXPECT_EQ(c.lines, (std::vector<std::string>{"abcd", "efgh", "ij", "xy"}));
}

TEST(LineSplitter, LineOfExactlyMaxBytesIsOneLine) {
  LineSplitter s(/*max_line_bytes=*/4);
  Collector c;
  s.feed("ab", c.callback());
  s.feed("cd\nef\n", c.callback());
  EXPECT_EQ(c.lines, (std::vector<std::string>{"abcd", "ef"}));
}

TEST(LineSplitter, OverlongLineWithoutNewlineIsBounded) {
  LineSplitter s(/*max_line_bytes=*/8);
  Collector c;
  for (int i = 0; i < 100; ++i) s.feed("xyz", c.callback());
  EXPECT_LT(s.pending(), 8u);
  EXPECT_EQ(c.lines.size(), 300u / 8u);
  for (const auto& line : c.lines) EXPECT_EQ(line.size(), 8u);
}

}  // namespace
}  // namespace lockstep::launch::detail
