// The text windows of `lockstep fit --data text`: which files are read, the windows' bytes, the split and
// the unigram baseline, against hand-built texts.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <string>
#include <vector>

#include "data_test_util.h"
#include "lockstep/data/data_error.h"
#include "lockstep/data/text_dataset.h"

namespace lockstep::data {
namespace {

using testing::expect_error;
using testing::TempDir;
using testing::write_plain;

std::vector<uint8_t> text_bytes(const std::string& text) {
  return {text.begin(), text.end()};
}

at::Tensor bytes_of(const std::string& text) {
  return at::tensor(std::vector<int64_t>(text.begin(), text.end()), at::kLong).to(at::kByte);
}

std::string string_of(const at::Tensor& ids) {
  std::string out;
  for (int64_t i = 0; i < ids.numel(); ++i) out += static_cast<char>(ids[i].item<int64_t>());
  return out;
}

TEST(TextFiles, ADirectoryGivesItsFilesWithoutAnExtensionInNameOrder) {
  TempDir dir;
  write_plain(dir.file("zen"), text_bytes("ZZ"));
  write_plain(dir.file("art"), text_bytes("AA"));
  write_plain(dir.file("art.dat"), text_bytes("index"));     // fortunes' strfile index: not text
  write_plain(dir.file(".gitignore"), text_bytes("*.dat"));  // a dotfile has no extension either: not text
  std::filesystem::create_directory(dir.file("sub"));
  EXPECT_EQ(text_files(dir.str()), (std::vector<std::string>{dir.file("art"), dir.file("zen")}));
  EXPECT_EQ(string_of(read_text(dir.str())), "AAZZ");
  // A file named directly is read whatever its name.
  EXPECT_EQ(text_files(dir.file("art.dat")), std::vector<std::string>{dir.file("art.dat")});
}

TEST(TextFiles, NoTextNamesThePathAndTheFix) {
  TempDir dir;
  write_plain(dir.file("only.dat"), text_bytes("x"));
  expect_error<DataError>([&] { text_files(dir.str()); },
                          {"no text file", dir.str(), "apt-get install fortunes", "another text file"});
  expect_error<DataError>([&] { text_files(dir.file("missing")); },
                          {"no such file or directory", dir.file("missing"), "another text file"});
}

TEST(TextWindows, EachWindowPredictsItsNextBytes) {
  const std::string text = "abcdefghijk";  // 11 bytes, seq 3: windows abcd, defg, ghij (k is left over)
  TextWindows windows(bytes_of(text), 3, "toy");
  ASSERT_EQ(windows.size(), 3);
  EXPECT_EQ(windows.seq(), 3);
  const Batch b = windows.get_batch({2, 0}, {});
  EXPECT_EQ(b.data.scalar_type(), at::kLong);
  EXPECT_EQ(b.data.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(string_of(b.data[0]), "ghi");
  EXPECT_EQ(string_of(b.target[0]), "hij");
  EXPECT_EQ(string_of(b.data[1]), "abc");
  EXPECT_EQ(string_of(b.target[1]), "bcd");
  EXPECT_EQ(string_of(windows.bytes()), "abcdefghij");
}

TEST(TextWindows, RefusesTooShortATextAndBadArguments) {
  expect_error<std::invalid_argument>([] { TextWindows(bytes_of("abc"), 3, "short"); },
                                      {"'short' has 3 bytes", "seq + 1 = 4"});
  expect_error<std::invalid_argument>([] { TextWindows(bytes_of("abcd"), 0, "x"); }, {"seq must be >= 1"});
  expect_error<std::invalid_argument>([] { TextWindows(at::zeros({4}, at::kLong), 1, "x"); },
                                      {"uint8 tensor [N], got Long [4] on cpu"});
}

TEST(SplitText, TrainsOnTheFirstWindowsAndValidatesOnTheRest) {
  // 41 bytes, seq 4: 10 windows; 9 train (bytes 0..36), 1 validates (bytes 36..40).
  std::string text;
  for (int i = 0; i < 41; ++i) text += static_cast<char>('0' + i);
  const TextSplits splits = split_text(bytes_of(text), 4, 0.1, "t");
  ASSERT_EQ(splits.train->size(), 9);
  ASSERT_EQ(splits.val->size(), 1);
  EXPECT_EQ(string_of(splits.val->get_batch({0}, {}).data[0]), text.substr(36, 4));
  EXPECT_EQ(string_of(splits.val->get_batch({0}, {}).target[0]), text.substr(37, 4));
  EXPECT_EQ(string_of(splits.train->get_batch({8}, {}).target[0]), text.substr(33, 4));
  expect_error<std::invalid_argument>(
      [] { split_text(bytes_of("abcdefgh"), 4, 0.1, "tiny"); },
      {"text 'tiny' has 8 bytes", "1 window(s)", "at least 9 bytes", "longer text"});
  expect_error<std::invalid_argument>([] { split_text(bytes_of("abcdefgh"), 0, 0.1, "t"); },
                                      {"split_text: seq must be >= 1, got 0"});
  expect_error<std::invalid_argument>([] { split_text(bytes_of(""), 1, 0.1, "empty"); },
                                      {"has 0 bytes: 0 window(s)"});
}

TEST(UnigramPerplexity, IsTheExpOfTheMeanSurprisalUnderAddOneCounts) {
  // Train "aab": counts a 3, b 2, every other byte 1 (add-one); total 256 + 3.
  const double total = 259.0;
  const double expected =
      std::exp(-(std::log(3.0 / total) + std::log(2.0 / total) + std::log(1.0 / total)) / 3);
  EXPECT_NEAR(unigram_perplexity(bytes_of("aab"), bytes_of("abc")), expected, 1e-9 * expected);
}

}  // namespace
}  // namespace lockstep::data
