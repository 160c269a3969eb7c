// A character-level language model trained with lockstep's Trainer on a text corpus from a Debian package
// (the `fortunes` package: /usr/share/games/fortunes, ~2.8 MB of English quotations), read as a stream:
//
//   apt-get install fortunes
//   build/examples/char_lm --devices 2 --max-epochs 1
//
// What it shows (docs/trainer.md, "Bring your own data"):
//  - an IterableDataset: the corpus is read front to back, one window of `seq` + 1 bytes at a time, and
//    each rank keeps its positions of the stream (no random access, no index; skip() seeks on resume);
//  - a batch type of the user's own (TokenBatch) with its collate function and data::BatchTraits;
//  - a BasicTrainModule<TokenBatch>: an embedding, a GRU and a linear head over bytes (vocabulary 256).
// At the end rank 0 prints the validation perplexity (per byte) next to the unigram baseline's (each byte
// predicted from its frequency in the training text): the model must beat it.
//
// Options: --devices N, --max-epochs N, --max-steps N, --batch-size B (per rank, default 32),
// --limit-train-batches N, --limit-val-batches N, --ckpt-dir DIR, --resume PATH, --seed S,
// --data-dir DIR (default /usr/share/games/fortunes), --seq N (default 64), --lr X (default 0.003).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include "example_flags.h"
#include "lockstep/data/iterable_dataset.h"
#include "lockstep/train/trainer.h"
#include "text_corpus.h"

namespace {

namespace data = lockstep::data;
namespace train = lockstep::train;

/// A batch of byte windows: input[b, t] predicts target[b, t] (the next byte).
struct TokenBatch {
  at::Tensor input;   // int64 [B, seq]
  at::Tensor target;  // int64 [B, seq]
};

}  // namespace

/// How lockstep counts and moves a TokenBatch.
template <>
struct lockstep::data::BatchTraits<TokenBatch> {
  static int64_t size(const TokenBatch& b) { return b.input.size(0); }
  static TokenBatch to(const TokenBatch& b, const c10::Device& d) { return {b.input.to(d), b.target.to(d)}; }
};

namespace {

/// Windows [first, first + count) of the corpus: window w is bytes [w * seq, w * seq + seq + 1), so every
/// byte after the first is predicted once. Read in order; the length is not declared (size() stays
/// unknown), so the Trainer learns where an epoch ends by reading one batch ahead, as for a socket.
class TextWindows : public data::IterableDataset<at::Tensor> {
 public:
  TextWindows(std::shared_ptr<const examples::Corpus> corpus, int64_t seq, int64_t first, int64_t count)
      : corpus_(std::move(corpus)), seq_(seq), first_(first), count_(count) {}

  std::unique_ptr<data::SampleStream<at::Tensor>> open(int64_t /*epoch*/) const override {
    return std::make_unique<Stream>(*this);
  }
  std::string description() const override {
    return std::to_string(count_) + " windows of " + std::to_string(seq_ + 1) + " bytes";
  }

 private:
  struct Stream : data::SampleStream<at::Tensor> {
    explicit Stream(const TextWindows& d) : d(d) {}
    std::optional<at::Tensor> next() override {
      if (w >= d.count_) return std::nullopt;
      at::Tensor bytes = at::empty({d.seq_ + 1}, at::kByte);
      d.corpus_->read((d.first_ + w++) * d.seq_, d.seq_ + 1, bytes.data_ptr<uint8_t>());
      return bytes;
    }
    int64_t skip(int64_t n) override {  // a file of fixed-size records seeks instead of reading
      const int64_t skipped = std::min(n, d.count_ - w);
      w += skipped;
      return skipped;
    }
    const TextWindows& d;
    int64_t w = 0;
  };
  std::shared_ptr<const examples::Corpus> corpus_;
  int64_t seq_, first_, count_;
};

TokenBatch collate_windows(std::vector<at::Tensor>&& windows) {
  const at::Tensor stacked = at::stack(windows).to(at::kLong);
  const int64_t seq = stacked.size(1) - 1;
  return {stacked.narrow(1, 0, seq).contiguous(), stacked.narrow(1, 1, seq).contiguous()};
}

class CharLm : public train::BasicTrainModule<TokenBatch> {
 public:
  explicit CharLm(double lr)
      : embed(register_module("embed", torch::nn::Embedding(256, 64))),
        gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(64, 192).batch_first(true)))),
        head(register_module("head", torch::nn::Linear(192, 256))),
        lr_(lr) {}

  at::Tensor loss_of(const TokenBatch& batch) {
    const at::Tensor hidden = std::get<0>(gru->forward(embed(batch.input)));
    return torch::nn::functional::cross_entropy(head(hidden).reshape({-1, 256}), batch.target.reshape({-1}));
  }
  at::Tensor training_step(const TokenBatch& batch, int64_t) override {
    at::Tensor loss = loss_of(batch);
    log("train_loss", loss, train::LogOptions().sync_dist(true).prog_bar(true));
    return loss;
  }
  void validation_step(const TokenBatch& batch, int64_t) override {
    log("val_loss", loss_of(batch), train::LogOptions().sync_dist(true).prog_bar(true));
  }
  train::OptimizerConfig configure_optimizers() override {
    return {std::make_unique<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(lr_)), std::nullopt};
  }
  std::string checkpoint_name() const override { return "CharLm"; }

  torch::nn::Embedding embed;
  torch::nn::GRU gru;
  torch::nn::Linear head;

 private:
  double lr_;
};

class TextData : public train::BasicDataModule<TokenBatch> {
 public:
  TextData(std::string dir, int64_t seq, int64_t batch) : dir_(std::move(dir)), seq_(seq), batch_(batch) {}
  void setup() override {
    corpus_ = std::make_shared<examples::Corpus>(dir_);
    const int64_t windows = (corpus_->size() - 1) / seq_;
    train_windows_ = windows * 9 / 10;  // the first 90% trains, the rest validates
    val_windows_ = windows - train_windows_;
  }
  data::DataSource<TokenBatch> train_data() override {
    return {std::make_shared<TextWindows>(corpus_, seq_, 0, train_windows_),
            data::LoaderOptions(batch_).num_workers(1).drop_last(true), collate_windows};
  }
  std::optional<data::DataSource<TokenBatch>> val_data() override {
    return data::DataSource<TokenBatch>(
        std::make_shared<TextWindows>(corpus_, seq_, train_windows_, val_windows_),
        data::LoaderOptions(batch_).num_workers(1), collate_windows);
  }
  /// The trivial baseline's perplexity per byte (examples/text_corpus.h).
  double unigram_perplexity() const {
    return examples::unigram_perplexity(*corpus_, train_windows_ * seq_ + 1, train_windows_ * seq_ + 1,
                                        val_windows_ * seq_);
  }

 private:
  std::string dir_;
  int64_t seq_, batch_;
  std::shared_ptr<const examples::Corpus> corpus_;
  int64_t train_windows_ = 0, val_windows_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  return examples::run_example("char_lm", [&] {
    auto options = train::TrainerOptions().max_epochs(1).gradient_clip_val(1.0).seed(1);
    int64_t batch = 32;
    const auto extra = examples::parse_flags(
        argc, argv, options, batch,
        {{"data-dir", "/usr/share/games/fortunes"}, {"seq", "64"}, {"lr", "0.003"}}, "char_lm");
    TextData data(extra.at("data-dir"), examples::whole_number("--seq", extra.at("seq")), batch);
    torch::manual_seed(0);  // the same initial weights whatever the world size (DDP broadcasts rank 0's)
    auto model = std::make_shared<CharLm>(examples::real_number("--lr", extra.at("lr")));
    train::Trainer trainer(options);
    const train::TrainerResult result = trainer.fit(model, data);
    if (trainer.rank() == 0 && !result.epochs.empty()) {
      std::printf(
          "char_lm quality: val_perplexity %.3f baseline %.3f (per byte; the baseline predicts each byte "
          "from its frequency), %lld step(s) on %d rank(s)\n",
          std::exp(result.epochs.back().val_loss), data.unigram_perplexity(),
          static_cast<long long>(result.global_step), trainer.world_size());
    }
  });
}
