#include "lockstep/data/transforms.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>

namespace lockstep::data {
namespace {

// SplitMix64: a tiny, fast, well-mixed generator for the per-sample crop offsets and flips.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (n small: the modulo bias is below 2^-50).
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
};

// Value of a per-channel option of size 0 (the default), 1 (all channels) or C.
double per_channel(const std::vector<double>& v, int64_t c, double fallback) {
  if (v.empty()) return fallback;
  return v.size() == 1 ? v[0] : v[static_cast<size_t>(c)];
}

void check_size(const std::vector<double>& v, int64_t channels, const char* name) {
  if (!v.empty() && v.size() != 1 && static_cast<int64_t>(v.size()) != channels) {
    throw std::invalid_argument(std::string("TransformOptions: ") + name + " must have 0, 1 or " +
                                std::to_string(channels) + " (the image channels) values, got " +
                                std::to_string(v.size()));
  }
}

}  // namespace

Transform::Transform(TransformOptions options, int64_t channels)
    : options_(std::move(options)), channels_(channels) {
  if (channels < 1)
    throw std::invalid_argument("Transform: channels must be >= 1, got " + std::to_string(channels));
  check_size(options_.mean(), channels, "mean");
  check_size(options_.std(), channels, "std");
  for (double s : options_.std()) {
    if (s == 0.0) throw std::invalid_argument("TransformOptions: std values must be non-zero, got 0");
  }
  if (options_.random_crop_padding() < 0) {
    throw std::invalid_argument("TransformOptions: random_crop_padding must be >= 0 (0 = off), got " +
                                std::to_string(options_.random_crop_padding()));
  }
  // torchvision: ToTensor divides by 255 in float32, Normalize then subtracts and divides in float32.
  table_.resize(static_cast<size_t>(channels) * 256);
  for (int64_t c = 0; c < channels; ++c) {
    const auto mean = static_cast<float>(per_channel(options_.mean(), c, 0.0));
    const auto std = static_cast<float>(per_channel(options_.std(), c, 1.0));
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>(v) / 255.0f;
      table_[static_cast<size_t>(c * 256 + v)] = (x - mean) / std;
    }
  }
}

at::Tensor Transform::operator()(const at::Tensor& images) const {
  const at::Tensor src = checked(images);
  return run(src.data_ptr<uint8_t>(), nullptr, src.size(0), src.size(2), src.size(3), nullptr);
}

at::Tensor Transform::augment(const at::Tensor& images, uint64_t seed) const {
  const at::Tensor src = checked(images);
  return run(src.data_ptr<uint8_t>(), nullptr, src.size(0), src.size(2), src.size(3), &seed);
}

at::Tensor Transform::augment(const at::Tensor& images, at::Generator& generator) const {
  uint64_t seed;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    seed = at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
  }
  return augment(images, seed);
}

at::Tensor Transform::gather(const at::Tensor& images, c10::ArrayRef<int64_t> rows,
                             const uint64_t* seed) const {
  const at::Tensor src = checked(images);
  return run(src.data_ptr<uint8_t>(), rows.data(), static_cast<int64_t>(rows.size()), src.size(2),
             src.size(3), seed);
}

at::Tensor Transform::checked(const at::Tensor& images) const {
  if (!images.defined() || images.scalar_type() != at::kByte || images.dim() != 4 ||
      images.size(1) != channels_ || !images.device().is_cpu()) {
    std::ostringstream os;
    os << "Transform: expected a CPU uint8 tensor [B, " << channels_ << ", H, W], got ";
    if (images.defined()) {
      os << images.scalar_type() << " " << images.sizes() << " on " << images.device();
    } else {
      os << "an undefined tensor";
    }
    throw std::invalid_argument(os.str());
  }
  return images.contiguous();
}

// The one pass that does everything: for each output sample, pick its source row, its crop offset and
// flip (when augmenting), and write table[channel][pixel] for every output pixel; pixels that fall into
// the zero padding take table[channel][0].
//
// Aligned to a cache line: the speed of the table-lookup loop below depends on where it falls in the
// binary (measured: 0.018 ms a seed-MLP batch at a 64-byte boundary, 0.030 ms 48 bytes past one, the same
// instructions), and the default 16-byte alignment left that to whatever code the linker put before it.
__attribute__((aligned(64))) at::Tensor Transform::run(const uint8_t* base, const int64_t* rows,
                                                       int64_t count, int64_t height, int64_t width,
                                                       const uint64_t* seed) const {
  at::Tensor out = at::empty({count, channels_, height, width}, at::kFloat);
  float* dst = out.data_ptr<float>();
  const int64_t plane = height * width;
  const int64_t sample_bytes = channels_ * plane;
  const int64_t pad = seed ? options_.random_crop_padding() : 0;
  const bool may_flip = seed && options_.horizontal_flip();
  SplitMix64 rng{seed ? *seed : 0};
  for (int64_t b = 0; b < count; ++b) {
    const uint8_t* sample = base + (rows ? rows[b] : b) * sample_bytes;
    // Draw in a fixed order per sample (crop, then flip) so results depend on the seed only.
    const int64_t dy = pad > 0 ? rng.below(2 * pad + 1) - pad : 0;
    const int64_t dx = pad > 0 ? rng.below(2 * pad + 1) - pad : 0;
    const bool flip = may_flip && (rng.next() >> 63) != 0;
    for (int64_t c = 0; c < channels_; ++c) {
      const float* table = table_.data() + c * 256;
      const uint8_t* in = sample + c * plane;
      float* o = dst + (b * channels_ + c) * plane;
      if (dy == 0 && dx == 0 && !flip) {
        for (int64_t i = 0; i < plane; ++i) o[i] = table[in[i]];
        continue;
      }
      const float zero = table[0];
      for (int64_t y = 0; y < height; ++y) {
        float* orow = o + y * width;
        const int64_t sy = y + dy;
        if (sy < 0 || sy >= height) {
          for (int64_t x = 0; x < width; ++x) orow[x] = zero;
          continue;
        }
        const uint8_t* irow = in + sy * width;
        for (int64_t x = 0; x < width; ++x) {
          // Crop, then flip the cropped image: output column x shows cropped column W-1-x.
          const int64_t sx = (flip ? width - 1 - x : x) + dx;
          orow[x] = (sx < 0 || sx >= width) ? zero : table[irow[sx]];
        }
      }
    }
  }
  return out;
}

}  // namespace lockstep::data
