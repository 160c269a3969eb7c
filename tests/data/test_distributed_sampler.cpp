// lockstep's DistributedSampler against PyTorch's: the same indices for the same arguments, checked
// (a) against torch.utils.data.DistributedSampler run at test time under the python3 with this build's torch,
// and (b) against small cases written out by hand from PyTorch's algorithm (no Python needed).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "lockstep/data/distributed_sampler.h"
#include "lockstep/data/elastic_epoch.h"

namespace lockstep::data {
namespace {

struct Case {
  int64_t size, replicas, rank;
  bool shuffle;
  uint64_t seed;
  int64_t epoch;
  bool drop_last;
};

std::vector<int64_t> ours(const Case& c) {
  DistributedSampler s(
      c.size,
      DistributedSamplerOptions(c.replicas, c.rank).shuffle(c.shuffle).seed(c.seed).drop_last(c.drop_last));
  s.set_epoch(c.epoch);
  return s.indices();
}

std::vector<Case> reference_cases() {
  std::vector<Case> cases;
  for (int64_t size : {0, 1, 7, 10, 64, 1001, 60000}) {
    for (int64_t replicas : {1, 2, 3, 4, 8}) {
      for (bool drop_last : {false, true}) {
        for (bool shuffle : {true, false}) {
          for (int64_t rank = 0; rank < replicas; rank += (replicas > 3 ? replicas - 1 : 1)) {
            const int64_t epoch = (size + replicas) % 3;
            cases.push_back(
                {size, replicas, rank, shuffle, 42u + static_cast<uint64_t>(replicas), epoch, drop_last});
          }
        }
      }
    }
  }
  cases.push_back({3, 8, 5, true, 0, 0, false});  // padding longer than the dataset: repeats it whole
  cases.push_back({3, 8, 7, true, 0, 1, true});   // drop_last with fewer samples than ranks: nothing
  return cases;
}

// Runs tests/data/sampler_reference.py under LOCKSTEP_PYTHON: the python3 whose torch is the LibTorch this
// build uses (CMake finds it, ctest passes it; cmake/LockstepTorch.cmake). A missing one fails the test.
TEST(DistributedSampler, SameIndicesAsPyTorchsDistributedSampler) {
  const char* source_dir = std::getenv("LOCKSTEP_SOURCE_DIR");
  const char* python_env = std::getenv("LOCKSTEP_PYTHON");
  ASSERT_TRUE(source_dir != nullptr && python_env != nullptr)
      << "run through ctest, which sets LOCKSTEP_SOURCE_DIR and LOCKSTEP_PYTHON";
  const std::string python = python_env;
  ASSERT_TRUE(!python.empty() && python.find("NOTFOUND") == std::string::npos)
      << "CMake found no python3 with this build's torch (LOCKSTEP_PYTHON=" << python
      << "): install it (1.13: apt-get install python3-torch; 2.x: pip install torch) or configure with "
         "-DLOCKSTEP_PYTHON=PATH";
  const auto cases = reference_cases();
  nlohmann::json input = nlohmann::json::array();
  for (const auto& c : cases) {
    input.push_back({c.size, c.replicas, c.rank, c.shuffle, c.seed, c.epoch, c.drop_last});
  }
  char in_path[] = "/tmp/lockstep_sampler_in_XXXXXX";
  const int fd = mkstemp(in_path);
  ASSERT_GE(fd, 0);
  const std::string text = input.dump();
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const std::string command = python + " " + source_dir + "/tests/data/sampler_reference.py < " + in_path;
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  const int status = pclose(pipe);
  std::remove(in_path);
  ASSERT_EQ(status, 0) << "reference script failed: " << command;
  const auto expected = nlohmann::json::parse(output);
  ASSERT_EQ(expected.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    EXPECT_EQ(ours(c), expected[i].get<std::vector<int64_t>>())
        << "size=" << c.size << " replicas=" << c.replicas << " rank=" << c.rank << " shuffle=" << c.shuffle
        << " seed=" << c.seed << " epoch=" << c.epoch << " drop_last=" << c.drop_last;
  }
}

TEST(DistributedSampler, PadsByRepeatingFromTheStartWithoutShuffle) {
  // PyTorch, size 10, 4 replicas, no shuffle: [0..9] + [0, 1] -> rank r takes r, r+4, r+8.
  EXPECT_EQ(ours({10, 4, 0, false, 0, 0, false}), (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(ours({10, 4, 1, false, 0, 0, false}), (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(ours({10, 4, 2, false, 0, 0, false}), (std::vector<int64_t>{2, 6, 0}));
  EXPECT_EQ(ours({10, 4, 3, false, 0, 0, false}), (std::vector<int64_t>{3, 7, 1}));
  // drop_last: 10 -> 8 samples, 2 per rank.
  EXPECT_EQ(ours({10, 4, 3, false, 0, 0, true}), (std::vector<int64_t>{3, 7}));
  // Padding longer than the data: [0, 1, 2] repeated -> 0 1 2 0 1 2 0 1.
  EXPECT_EQ(ours({3, 8, 6, false, 0, 0, false}), (std::vector<int64_t>{0}));
  EXPECT_EQ(ours({3, 8, 7, false, 0, 0, false}), (std::vector<int64_t>{1}));
}

TEST(DistributedSampler, RanksPartitionTheEpochAndEpochsDiffer) {
  const int64_t size = 1000;
  std::multiset<int64_t> seen;
  for (int64_t r = 0; r < 4; ++r) {
    for (auto i : ours({size, 4, r, true, 7, 3, false})) seen.insert(i);
  }
  ASSERT_EQ(seen.size(), 1000u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 1000u);  // no index twice
  EXPECT_NE(ours({size, 4, 0, true, 7, 3, false}), ours({size, 4, 0, true, 7, 4, false}));
  EXPECT_EQ(ours({size, 4, 0, true, 7, 3, false}), ours({size, 4, 0, true, 7, 3, false}));
}

TEST(DistributedSampler, BadArgumentsNameTheValue) {
  try {
    DistributedSampler(10, DistributedSamplerOptions(2, 2));
    FAIL() << "rank 2 of 2 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank must be in [0, 1]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(DistributedSampler(10, DistributedSamplerOptions(0, 0)), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(-1, DistributedSamplerOptions(1, 0)), std::invalid_argument);
}

}  // namespace
}  // namespace lockstep::data

namespace lockstep::data {
namespace {

// What 2 ranks consumed plus what 3 new ranks get covers the epoch's shuffle exactly once (the padding
// aside), the new shares are equal, and each is the rest in the old padded order, dealt round-robin.
TEST(ReshardRemaining, TheRestOfTheEpochOnceOverTheNewRanks) {
  const int64_t size = 101;  // odd: the old sampler pads one index
  const auto old_options = DistributedSamplerOptions(2, 0).shuffle(true).seed(7);
  std::vector<std::vector<int64_t>> old;
  for (int64_t r = 0; r < 2; ++r) {
    DistributedSampler s(size, DistributedSamplerOptions(old_options).rank(r));
    s.set_epoch(3);
    old.push_back(s.indices());
  }
  const int64_t consumed = 20;
  const int64_t planned = 51;  // the whole shard
  std::vector<int64_t> want_rest;
  for (int64_t k = consumed; k < planned; ++k) {
    for (int64_t r = 0; r < 2; ++r) want_rest.push_back(old[r][k]);
  }
  std::vector<int64_t> dealt(want_rest.size(), -1);
  std::size_t share = 0;
  for (int64_t rank = 0; rank < 3; ++rank) {
    const auto mine = reshard_remaining(size, old_options, 3, consumed, planned, 3, rank);
    if (rank == 0) share = mine.size();
    ASSERT_EQ(mine.size(), share) << "rank " << rank;
    for (std::size_t k = 0; k < mine.size(); ++k) {
      const std::size_t position = static_cast<std::size_t>(rank) + 3 * k;
      if (position < dealt.size())
        dealt[position] = mine[k];
      else
        EXPECT_EQ(mine[k], want_rest[position - dealt.size()]) << "padding repeats from the start";
    }
  }
  EXPECT_EQ(share, (want_rest.size() + 2) / 3);
  EXPECT_EQ(dealt, want_rest);
  std::multiset<int64_t> seen(old[0].begin(), old[0].begin() + consumed);
  seen.insert(old[1].begin(), old[1].begin() + consumed);
  seen.insert(want_rest.begin(), want_rest.end());
  for (int64_t i = 0; i < size; ++i) EXPECT_GE(seen.count(i), 1u) << "index " << i << " never seen";
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(2 * planned));  // 101 indices + 1 of padding
}

TEST(ReshardRemaining, NothingLeftAndBadArguments) {
  const auto old_options = DistributedSamplerOptions(2, 0).seed(1);
  EXPECT_TRUE(reshard_remaining(10, old_options, 0, 5, 5, 1, 0).empty());
  EXPECT_THROW(reshard_remaining(10, old_options, 0, 6, 5, 1, 0), std::invalid_argument);
  EXPECT_THROW(reshard_remaining(10, old_options, 0, 0, 6, 1, 0), std::invalid_argument);
  EXPECT_THROW(reshard_remaining(10, old_options, 0, 0, 5, 2, 2), std::invalid_argument);
}

// An epoch that loses ranks twice (4 -> 3 -> 1): every index of the dataset is trained once, but padding,
// and each part is what reshard_remaining deals for the parts before it.
TEST(ElasticEpoch, EverySampleOnceThroughTwoChanges) {
  const int64_t size = 103;
  const auto options = DistributedSamplerOptions(4, 0).seed(11);
  std::vector<ElasticEpoch> ranks;
  for (int64_t r = 0; r < 4; ++r) ranks.emplace_back(size, DistributedSamplerOptions(options).rank(r), 2);
  DistributedSampler sampler(size, DistributedSamplerOptions(options).rank(1));
  sampler.set_epoch(2);
  EXPECT_EQ(ranks[1].indices(), sampler.indices()) << "before any change: the sampler's own indices";

  std::multiset<int64_t> seen;
  const auto consume = [&](int64_t k) {
    for (auto& part : ranks) seen.insert(part.indices().begin(), part.indices().begin() + k);
  };
  consume(7);  // 4 ranks, 7 samples each; then ranks 1 and 3 of the old world are lost
  std::vector<ElasticEpoch> three = {ranks[0], ranks[2], ranks[3]};
  for (int64_t r = 0; r < 3; ++r) three[static_cast<std::size_t>(r)].reshard(7, 3, r);
  const auto want = reshard_remaining(size, options, 2, {{4, 7, -1}}, 3, 2);
  EXPECT_EQ(three[2].indices(), want);
  EXPECT_EQ(three[2].num_replicas(), 3);
  ranks = three;
  consume(5);
  std::vector<ElasticEpoch> one = {ranks[1]};
  one[0].reshard(5, 1, 0);
  ranks = one;
  consume(static_cast<int64_t>(ranks[0].indices().size()));
  for (int64_t i = 0; i < size; ++i) EXPECT_GE(seen.count(i), 1u) << "index " << i << " never trained";
  EXPECT_LE(seen.size(), static_cast<std::size_t>(size + 4 + 3)) << "more than each part's padding repeated";
  EXPECT_THROW(ranks[0].reshard(ranks[0].indices().size() + 1, 1, 0), std::invalid_argument);
  EXPECT_THROW(ranks[0].reshard(0, 2, 2), std::invalid_argument);
}

}  // namespace
}  // namespace lockstep::data
