#include "lockstep/train/progress_bar.h"

#include <algorithm>

namespace lockstep::train {

void ProgressBar::start(int64_t epoch, int64_t max_epochs, int64_t total) {
  epoch_ = epoch;
  max_epochs_ = max_epochs;
  total_ = total;
  started_ = std::chrono::steady_clock::now();
  last_draw_ = started_;
}

void ProgressBar::update(int64_t done, int64_t samples, double loss) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < interval_ && (total_ < 0 || done < total_)) return;
  last_draw_ = now;
  draw(done, samples, loss);
}

void ProgressBar::draw(int64_t done, int64_t samples, double loss) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const double rate = seconds > 0 ? static_cast<double>(samples) / seconds : 0.0;
  if (total_ < 0) {  // a stream of unknown length: no bar, no total
    std::fprintf(out_, "\r\033[Kepoch %lld/%lld batch %lld  %.0f samples/s  loss %.4f",
                 static_cast<long long>(epoch_ + 1), static_cast<long long>(max_epochs_),
                 static_cast<long long>(done), rate, loss);
    std::fflush(out_);
    drawn_ = true;
    return;
  }
  constexpr int kWidth = 30;
  const double fraction = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const int filled = std::clamp(static_cast<int>(fraction * kWidth), 0, kWidth);
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
  bar[kWidth] = '\0';
  std::fprintf(out_, "\r\033[Kepoch %lld/%lld [%s] %lld/%lld  %.0f samples/s  loss %.4f",
               static_cast<long long>(epoch_ + 1), static_cast<long long>(max_epochs_), bar,
               static_cast<long long>(done), static_cast<long long>(total_), rate, loss);
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fputs("\r\033[K", out_);
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace lockstep::train
