#include "lockstep/data/synthetic_dataset.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "splitmix.h"

namespace lockstep::data {
namespace {

constexpr double kNoiseStd = 48.0;  // grey levels
constexpr int64_t kChunk = 4096;    // samples drawn per step (bounds the float32 scratch memory) ...
constexpr int64_t kChunkBytes = int64_t{64} << 20;  // ... to 64 MiB: fewer samples per step for big images

using detail::mix;

void check(int64_t value, int64_t min, const char* name) {
  if (value < min) {
    throw std::invalid_argument(std::string("SyntheticDataset: ") + name +
                                " must be >= " + std::to_string(min) + ", got " + std::to_string(value));
  }
}

TensorDataset make(const SyntheticOptions& o, Split split) {
  check(o.size(), 0, "size");
  check(o.channels(), 1, "channels");
  check(o.height(), 1, "height");
  check(o.width(), 1, "width");
  check(o.num_classes(), 1, "num_classes");
  const int64_t n = o.size(), k = o.num_classes();
  // Prototypes from the seed alone: both splits share them, which is what makes the test split
  // predictable from the train split.
  at::Generator proto_gen = at::detail::createCPUGenerator(mix(o.seed()));
  const at::Tensor prototypes =
      at::randint(0, 256, {k, o.channels(), o.height(), o.width()}, proto_gen, at::TensorOptions(at::kFloat));
  at::Generator gen = at::detail::createCPUGenerator(mix(o.seed() ^ mix(split == Split::kTrain ? 1 : 2)));
  // Balanced labels (i mod k) in a random order.
  const at::Tensor labels = at::remainder(at::randperm(n, gen, at::kLong), k);
  at::Tensor images = at::empty({n, o.channels(), o.height(), o.width()}, at::kByte);
  // Images up to 3x32x32 keep 4096 samples a step, so their values do not depend on the bound.
  const int64_t image_bytes = o.channels() * o.height() * o.width() * static_cast<int64_t>(sizeof(float));
  const int64_t chunk = std::clamp<int64_t>(kChunkBytes / image_bytes, 1, kChunk);
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t end = std::min(n, begin + chunk);
    at::Tensor noise = at::randn({end - begin, o.channels(), o.height(), o.width()}, gen, at::kFloat);
    noise.mul_(kNoiseStd).add_(prototypes.index_select(0, labels.slice(0, begin, end)));
    images.slice(0, begin, end).copy_(noise.round_().clamp_(0, 255));
  }
  return TensorDataset(std::move(images), labels,
                       std::string("synthetic ") + to_string(split) + " split (" + std::to_string(n) +
                           " images " + std::to_string(o.channels()) + "x" + std::to_string(o.height()) +
                           "x" + std::to_string(o.width()) + ", " + std::to_string(k) + " classes, seed " +
                           std::to_string(o.seed()) + ")");
}

}  // namespace

SyntheticDataset::SyntheticDataset(SyntheticOptions options, Split split)
    : TensorDataset(make(options, split)) {}

}  // namespace lockstep::data
