// ChunkLayout: how the sharded strategies cut tensors among the ranks and lay them out rank by rank. A pure
// value type: tested without ranks.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "lockstep/shard/chunk_layout.h"

namespace lockstep::shard {
namespace {

/// Each tensor's stride, offset, and the part, in that order.
std::vector<int64_t> columns(const ChunkLayout& layout) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < layout.size(); ++i) {
    out.push_back(layout.stride(i));
    out.push_back(layout.offset(i));
  }
  out.push_back(layout.part());
  return out;
}

TEST(ChunkLayout, StridesAndOffsetsFollowTheSizesInOrder) {
  const ChunkLayout layout({5, 4}, /*world=*/2);
  EXPECT_EQ(columns(layout), (std::vector<int64_t>{3, 0, 2, 3, 5}));
  EXPECT_EQ(layout.chunk(0, 1).begin, 3);
  EXPECT_EQ(layout.chunk(0, 1).length, 2);  // the last chunk is short
  EXPECT_EQ(layout.chunk(1, 1).begin, 2);
  EXPECT_EQ(layout.chunk(1, 1).length, 2);
}

TEST(ChunkLayout, SizesNotDivisibleByTheWorldLeavePaddingThatPackDoesNotTouch) {
  const ChunkLayout layout({7}, /*world=*/3);  // stride 3: [0, 3) [3, 6) [6, 7)
  const at::Tensor t = at::arange(7, at::kFloat);
  const at::Tensor rows = at::full({3 * layout.part()}, -1.0, at::kFloat);
  layout.pack(rows, 0, t);
  const std::vector<float> expected{0, 1, 2, 3, 4, 5, 6, -1, -1};
  for (int64_t k = 0; k < rows.numel(); ++k) EXPECT_EQ(rows[k].item<float>(), expected[k]) << "at " << k;
  const at::Tensor back = at::zeros({7}, at::kFloat);
  layout.unpack(rows, 0, back);
  EXPECT_TRUE(back.equal(t));
}

TEST(ChunkLayout, AWorldLargerThanTheElementsGivesTheLastRanksEmptyChunks) {
  const ChunkLayout layout({3}, /*world=*/8);
  EXPECT_EQ(layout.stride(0), 1);
  EXPECT_EQ(layout.part(), 1);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(layout.chunk(0, r).begin, std::min(r, 3)) << "rank " << r;
    EXPECT_EQ(layout.chunk(0, r).length, r < 3 ? 1 : 0) << "rank " << r;
    EXPECT_EQ(layout.chunk_in(at::zeros({1}), 0, r).numel(), r < 3 ? 1 : 0) << "rank " << r;
  }
  const at::Tensor t = at::arange(3, at::kFloat) + 1;
  const at::Tensor rows = at::zeros({8}, at::kFloat);
  layout.pack(rows, 0, t);
  EXPECT_TRUE(rows.narrow(0, 0, 3).equal(t));
  EXPECT_EQ(rows.narrow(0, 3, 5).abs().sum().item<float>(), 0.0f);
}

TEST(ChunkLayout, EmptyListsAndEmptyTensorsTakeNoRoom) {
  const ChunkLayout none;
  EXPECT_EQ(none.world(), 1);
  EXPECT_EQ(columns(none), std::vector<int64_t>{0});
  EXPECT_EQ(columns(ChunkLayout({}, /*world=*/4)), std::vector<int64_t>{0});
  const ChunkLayout layout({0, 5, 0}, /*world=*/2);
  EXPECT_EQ(columns(layout), (std::vector<int64_t>{0, 0, 3, 0, 0, 3, 3}));
  EXPECT_EQ(layout.chunk(2, 1).length, 0);
  const at::Tensor rows = at::zeros({2 * layout.part()}, at::kFloat);
  layout.pack(rows, 0, at::zeros({0}, at::kFloat));  // nothing to move
  layout.unpack(rows, 2, at::zeros({0}, at::kFloat));
  EXPECT_EQ(rows.abs().sum().item<float>(), 0.0f);
}

// Row r holds chunk r of every tensor at its offset; unpacking gives every tensor back.
TEST(ChunkLayout, PackThenUnpackRestoresEveryTensorOverWorlds) {
  const std::vector<int64_t> sizes{0, 1, 3, 7, 8, 1000};
  for (int world : {1, 2, 3, 8}) {
    const ChunkLayout layout(sizes, world);
    std::vector<at::Tensor> tensors;
    const at::Tensor rows = at::zeros({world * layout.part()}, at::kDouble);
    for (size_t i = 0; i < sizes.size(); ++i) {
      tensors.push_back(at::rand({sizes[i]}, at::kDouble));
      layout.pack(rows, i, tensors[i]);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (int r = 0; r < world; ++r) {
        const ChunkRange mine = layout.chunk(i, r);
        const at::Tensor row = rows.narrow(0, r * layout.part(), layout.part());
        EXPECT_TRUE(layout.chunk_in(row, i, r).equal(tensors[i].narrow(0, mine.begin, mine.length)))
            << "tensor " << i << ", rank " << r << " of " << world;
      }
      const at::Tensor back = at::zeros({sizes[i]}, at::kDouble);
      layout.unpack(rows, i, back);
      EXPECT_TRUE(back.equal(tensors[i])) << "tensor " << i << " over " << world;
    }
  }
}

TEST(ChunkLayout, FirstKeepsTheOffsetsOfTheTensorsItKeeps) {
  const ChunkLayout layout({5, 4, 9}, /*world=*/2);
  const ChunkLayout two = layout.first(2);
  EXPECT_EQ(two.size(), 2u);
  EXPECT_EQ(two.offset(1), layout.offset(1));
  EXPECT_EQ(two.part(), layout.offset(2));
  EXPECT_EQ(layout.first(0).part(), 0);
  EXPECT_THROW(layout.first(4), c10::Error);
}

TEST(ChunkLayout, RefusesANonPositiveWorldAndNegativeSizes) {
  EXPECT_THROW(ChunkLayout({4}, /*world=*/0), c10::Error);
  EXPECT_THROW(ChunkLayout({-1}, /*world=*/2), c10::Error);
}

}  // namespace
}  // namespace lockstep::shard
