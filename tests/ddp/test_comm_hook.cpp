// Comm hooks over N ranks as threads (c10d::HashStore + Gloo): the plain hook gives the exact mean,
// the compression hooks the mean within their precision, identically on every rank, reusing staging.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "../comm/thread_group.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/ddp/comm_hook.h"

namespace lockstep::ddp {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;
using namespace std::chrono_literals;

comm::ProcessGroup make_hook_group(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store) {
  return comm::init_process_group(lockstep::testing::thread_group_options(rank, world, store, "hook-test"));
}

constexpr int64_t kSizes[] = {0, 1, 1001};

// Rank r's gradient: positive values spanning 1e-3 .. 1e3 (no cancellation, so relative error is meaningful).
at::Tensor mixed_gradient(int64_t n, int rank) {
  auto i = at::arange(n, at::kDouble);
  auto magnitude = at::pow(10.0, at::remainder(i, 7) - 3);
  return ((1.0 + 0.37 * rank + 0.0131 * i) * magnitude).to(at::kFloat);
}

at::Tensor mean_of_mixed_gradients(int64_t n, int world) {
  auto sum = at::zeros({n}, at::kDouble);
  for (int r = 0; r < world; ++r) sum += mixed_gradient(n, r).to(at::kDouble);
  return sum / world;
}

class HookWorld : public ::testing::TestWithParam<int> {};

TEST_P(HookWorld, AllReduceHookGivesExactMean) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = make_hook_group(rank, world, store);
    AllReduceHook hook;
    EXPECT_STREQ(hook.name(), "allreduce");
    for (int64_t n : kSizes) {
      // Integers times powers of two: every sum and the mean are exact in float.
      auto i = at::arange(n, at::kFloat);
      auto scale = at::pow(2.0, at::remainder(i, 7) - 3).to(at::kFloat);
      auto bucket = (i + 1) * static_cast<float>(rank + 1) * scale;
      hook.run(pg, bucket).wait();
      auto expected = (i + 1) * ((world + 1) / 2.0f) * scale;
      ASSERT_TRUE(at::equal(bucket, expected)) << "n=" << n << " rank=" << rank;
    }
    pg.shutdown();
  }));
}

void check_compression(at::ScalarType dtype, double rtol, int world) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::vector<at::Tensor>> results(world);
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = make_hook_group(rank, world, store);
    CompressionHook hook(dtype);
    for (int64_t n : kSizes) {
      auto bucket = mixed_gradient(n, rank);
      hook.run(pg, bucket).wait();
      ASSERT_EQ(bucket.scalar_type(), at::kFloat);
      auto expected = mean_of_mixed_gradients(n, world);
      auto rel_err =
          n == 0 ? 0.0 : ((bucket.to(at::kDouble) - expected).abs() / expected).max().item<double>();
      EXPECT_LE(rel_err, rtol) << hook.name() << " n=" << n << " rank=" << rank;
      // 16 bits went over the wire: the error is far above float's (~1e-7), or nothing was compressed.
      if (n == 1001) {
        EXPECT_GT(rel_err, 1e-5) << hook.name() << " rank=" << rank;
      }
      results[rank].push_back(bucket);
    }
    pg.shutdown();
  }));
  // Every rank must hold the same bits, or the replicas drift apart.
  for (int r = 1; r < world; ++r) {
    for (size_t k = 0; k < results[r].size() && k < results[0].size(); ++k) {
      EXPECT_TRUE(at::equal(results[r][k], results[0][k]))
          << "rank " << r << " differs from rank 0, size #" << k;
    }
  }
}

TEST_P(HookWorld, Fp16CompressionGivesMeanWithinHalfPrecision) {
  check_compression(at::kHalf, 1e-3, GetParam());
}

// On LibTorch 1.x this goes through the all-gather path (Gloo cannot reduce BFloat16 there).
TEST_P(HookWorld, Bf16CompressionGivesMeanWithinBfloat16Precision) {
  check_compression(at::kBFloat16, 1e-2, GetParam());
}

TEST_P(HookWorld, CompressionReusesStagingBufferPerBucket) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = make_hook_group(rank, world, store);
    CompressionHook hook(at::kHalf);
    auto staged_ptr = [](comm::Work& work) {
      work.wait();
      auto outputs = work.native()->result();  // the tensor that went over the wire
      EXPECT_EQ(outputs.size(), 1u);
      EXPECT_EQ(outputs.at(0).scalar_type(), at::kHalf);
      return outputs.at(0).data_ptr();
    };
    auto a = at::ones({300}, at::kFloat);
    auto b = at::ones({300}, at::kFloat);
    auto first = hook.run(pg, a);
    const void* staging_a = staged_ptr(first);
    auto other = hook.run(pg, b);
    const void* staging_b = staged_ptr(other);
    auto again = hook.run(pg, a);
    EXPECT_EQ(staged_ptr(again), staging_a)
        << "second call on the same bucket allocated a new staging tensor";
    EXPECT_NE(staging_b, staging_a) << "two live buckets share one staging tensor";
    EXPECT_TRUE(at::equal(a, at::ones({300}, at::kFloat)));
    pg.shutdown();
  }));
}

INSTANTIATE_TEST_SUITE_P(Worlds, HookWorld, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

TEST(CompressionHook, NamesAndDtypeValidation) {
  EXPECT_STREQ(CompressionHook(at::kHalf).name(), "fp16_compress");
  try {
    CompressionHook hook(at::kFloat);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("got Float"), std::string::npos) << e.what();
  }
  EXPECT_STREQ(CompressionHook(at::kBFloat16).name(), "bf16_compress");
}

}  // namespace
}  // namespace lockstep::ddp
