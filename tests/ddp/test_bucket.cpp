// Bucket assignment (bucket.h): reverse registration order, one dtype per bucket, a small first bucket
// per dtype then large ones, oversize parameters alone, empty parameters still placed; the default cap.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep/ddp/bucket.h"

namespace lockstep::ddp {
namespace {

using Buckets = std::vector<std::vector<size_t>>;
constexpr auto kF = c10::ScalarType::Float;   // 4 bytes
constexpr auto kD = c10::ScalarType::Double;  // 8 bytes
constexpr auto kH = c10::ScalarType::Half;    // 2 bytes

struct Case {
  const char* name;
  std::vector<int64_t> numels;
  std::vector<c10::ScalarType> dtypes;
  size_t first_cap;
  size_t cap;
  Buckets expected;
};

std::ostream& operator<<(std::ostream& out, const Case& c) {
  return out << c.name;
}

class AssignBuckets : public ::testing::TestWithParam<Case> {};

TEST_P(AssignBuckets, MatchesExpectedAssignment) {
  const Case& c = GetParam();
  EXPECT_EQ(assign_buckets(c.numels, c.dtypes, c.first_cap, c.cap).buckets, c.expected);
}

INSTANTIATE_TEST_SUITE_P(
    Table, AssignBuckets,
    ::testing::Values(
        Case{"AllFitInOneBucket", {10, 20, 30}, {kF, kF, kF}, 1024, 4096, {{2, 1, 0}}},
        Case{"EmptyModel", {}, {}, 1, 1, {}},
        // 4 floats = 16 bytes each. First bucket (32 B) takes two; later ones (64 B) take four.
        Case{"FirstBucketSmallThenBig",
             {4, 4, 4, 4, 4, 4, 4, 4},
             {kF, kF, kF, kF, kF, kF, kF, kF},
             32,
             64,
             {{7, 6}, {5, 4, 3, 2}, {1, 0}}},
        // A bucket that is exactly full stays open until the next parameter would overflow it.
        Case{"ExactlyFullThenNext", {2, 2, 2}, {kF, kF, kF}, 16, 16, {{2, 1}, {0}}},
        // Parameter 1 (400 B) exceeds the 64 B cap: it closes the open bucket and sits alone.
        Case{"ParameterOverCapAlone", {4, 100, 4, 4}, {kF, kF, kF, kF}, 64, 64, {{3, 2}, {1}, {0}}},
        Case{"OversizeFirstParameterAlone", {4, 100}, {kF, kF}, 64, 64, {{1}, {0}}},
        // Each dtype has its own open bucket and its own small first bucket; numbered as opened.
        Case{"MixedDtypes",
             {4, 2, 4, 2, 4, 2},
             {kF, kD, kF, kD, kF, kD},
             16,
             1000,
             {{5}, {4}, {3, 1}, {2, 0}}},
        Case{"ThreeDtypesInterleaved", {8, 8, 8}, {kH, kF, kD}, 1024, 1024, {{2}, {1}, {0}}},
        // Empty parameters cost nothing and join the open bucket (or open one).
        Case{"ZeroNumelParameters", {0, 4, 0, 4, 0}, {kF, kF, kF, kF, kF}, 16, 16, {{4, 3, 2}, {1, 0}}},
        Case{"OnlyEmptyParameters", {0, 0}, {kF, kF}, 1, 1, {{1, 0}}},
        Case{"TinyCapEveryParameterAlone", {3, 1, 2, 5}, {kF, kF, kF, kF}, 1, 1, {{3}, {2}, {1}, {0}}},
        Case{"OrderIsReverseRegistration",
             {1, 1, 1, 1, 1},
             {kF, kF, kF, kF, kF},
             1 << 20,
             1 << 20,
             {{4, 3, 2, 1, 0}}}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(AutoBucketCap, IsASixteenthOfTheGradientsWithin1And25MiB) {
  constexpr size_t kMiB = size_t{1} << 20;
  EXPECT_EQ(auto_bucket_cap_bytes(0), kMiB);
  EXPECT_EQ(auto_bucket_cap_bytes(kMiB), kMiB);       // a small MLP: one 1 MiB cap
  EXPECT_EQ(auto_bucket_cap_bytes(16 * kMiB), kMiB);  // the lower bound reached exactly
  EXPECT_EQ(auto_bucket_cap_bytes(80 * kMiB), 5 * kMiB);
  EXPECT_EQ(auto_bucket_cap_bytes(44695848), 44695848 / 16);     // ResNet18's float gradients: ~2.7 MiB
  EXPECT_EQ(auto_bucket_cap_bytes(400 * kMiB), 25 * kMiB);       // the upper bound reached exactly
  EXPECT_EQ(auto_bucket_cap_bytes(size_t{8} << 30), 25 * kMiB);  // an 8 GiB model: PyTorch's 25 MiB
}

TEST(AssignBucketsErrors, ZeroCapsAndSizeMismatchNameTheValue) {
  try {
    assign_buckets({1}, {kF}, 0, 8);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("first_bucket_cap_bytes must be > 0, got 0"), std::string::npos)
        << e.what();
  }
  try {
    assign_buckets({1}, {kF}, 8, 0);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bucket_cap_bytes must be > 0, got 0"), std::string::npos)
        << e.what();
  }
  try {
    assign_buckets({1, 2, 3}, {kF, kF}, 8, 8);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("got 3 numels and 2 dtypes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(assign_buckets({4, -1}, {kF, kF}, 8, 8), std::invalid_argument);
}

}  // namespace
}  // namespace lockstep::ddp
