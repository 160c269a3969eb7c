// A tabular regression from a real CSV shipped by a Debian package (python3-vega-datasets'
// seattle-weather.csv: 1461 days of Seattle weather), trained two ways on the same data:
//
//   apt-get install python3-vega-datasets
//   build/examples/tabular --devices 2                      # Lightning's style: the Trainer
//   build/lockstep run --nproc-per-node 2 --standalone -- build/examples/tabular --style accelerate
//
// The task: the day's maximum temperature (°C) from its minimum temperature, precipitation, wind, the
// weather label (one-hot) and the day of the year (sin, cos); 2012-2014 train, 2015 validates. Float
// features, a float target, MSE: a map-style dataset made from a function (data::make_dataset) whose
// batches are std::tuple<features, target>. At the end rank 0 prints the validation MSE next to the trivial
// baseline's (always predicting the training mean): the model must beat it.
//
// Options: --style trainer|accelerate, --devices N (trainer), --max-epochs N (default 20),
// --max-steps N, --batch-size B (per rank, default 32), --ckpt-dir DIR (final.safetensors; the Trainer's
// checkpoints), --resume PATH, --seed S, --csv PATH, --lr X (default 0.01).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include "example_flags.h"
#include "lockstep/train/accelerator.h"
#include "lockstep/train/safetensors.h"
#include "lockstep/train/trainer.h"

namespace {

namespace data = lockstep::data;
namespace train = lockstep::train;
using Rows = std::tuple<at::Tensor, at::Tensor>;  // features float [B, 10], target float [B]

constexpr const char* kDefaultCsv = "/usr/lib/python3/dist-packages/vega_datasets/_data/seattle-weather.csv";

/// The CSV as tensors, split by year, features standardised with the training split's statistics.
struct Weather {
  at::Tensor train_x, train_y, val_x, val_y;

  static Weather load(const std::string& path) {
    std::ifstream in(path);
    if (!in) {
      throw std::runtime_error("cannot read '" + path +
                               "': install it with `apt-get install python3-vega-datasets`" +
                               " or name the CSV with --csv");
    }
    const std::vector<std::string> labels = {"drizzle", "rain", "sun", "snow", "fog"};
    std::vector<float> x[2], y[2];
    std::string line;
    std::getline(in, line);
    if (line != "date,precipitation,temp_max,temp_min,wind,weather")
      throw std::runtime_error("'" + path + "' is not seattle-weather.csv: its header is '" + line + "'");
    for (int row = 2; std::getline(in, line); ++row) {
      std::stringstream fields(line);
      std::string date, precipitation, temp_max, temp_min, wind, weather;
      std::getline(fields, date, ',');
      std::getline(fields, precipitation, ',');
      std::getline(fields, temp_max, ',');
      std::getline(fields, temp_min, ',');
      std::getline(fields, wind, ',');
      std::getline(fields, weather, ',');
      int year = 0, month = 0, day = 0;
      if (std::sscanf(date.c_str(), "%d/%d/%d", &year, &month, &day) != 3)
        throw std::runtime_error(path + ":" + std::to_string(row) + ": bad date '" + date + "'");
      static const int kDaysBefore[] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
      const double angle = 2 * M_PI * (kDaysBefore[month - 1] + day) / 365.25;
      const int split = year == 2015 ? 1 : 0;
      x[split].insert(x[split].end(),
                      {std::stof(precipitation), std::stof(temp_min), std::stof(wind),
                       static_cast<float>(std::sin(angle)), static_cast<float>(std::cos(angle))});
      for (const std::string& label : labels) x[split].push_back(weather == label ? 1.0f : 0.0f);
      y[split].push_back(std::stof(temp_max));
    }
    auto as_tensor = [](std::vector<float>& v, int64_t columns) {
      return torch::from_blob(v.data(), {static_cast<int64_t>(v.size()) / columns, columns}).clone();
    };
    Weather w;
    w.train_x = as_tensor(x[0], 10);
    w.val_x = as_tensor(x[1], 10);
    w.train_y = as_tensor(y[0], 1).squeeze(1);
    w.val_y = as_tensor(y[1], 1).squeeze(1);
    const at::Tensor mean = w.train_x.mean(0), std = w.train_x.std(0).clamp_min(1e-6);
    w.train_x = (w.train_x - mean) / std;
    w.val_x = (w.val_x - mean) / std;
    return w;
  }

  /// The validation MSE of always predicting the training mean.
  double baseline_mse() const { return (val_y - train_y.mean()).pow(2).mean().item<double>(); }
};

std::shared_ptr<data::Dataset<Rows>> rows(at::Tensor x, at::Tensor y) {
  return data::make_dataset(x.size(0), [x, y](int64_t i) { return Rows{x[i], y[i]}; });
}

struct RegressorImpl : torch::nn::Module {
  RegressorImpl()
      : fc1(register_module("fc1", torch::nn::Linear(10, 32))),
        fc2(register_module("fc2", torch::nn::Linear(32, 1))) {}
  at::Tensor forward(const at::Tensor& x) { return fc2(torch::relu(fc1(x))).squeeze(1); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Regressor);

// ---- Lightning's style

class LitRegressor : public train::BasicTrainModule<Rows> {
 public:
  explicit LitRegressor(double lr) : net(register_module("net", Regressor())), lr_(lr) {}
  at::Tensor training_step(const Rows& batch, int64_t) override {
    at::Tensor loss = torch::nn::functional::mse_loss(net(std::get<0>(batch)), std::get<1>(batch));
    log("train_loss", loss, train::LogOptions().sync_dist(true).prog_bar(true));
    return loss;
  }
  void validation_step(const Rows& batch, int64_t) override {
    log("val_loss", torch::nn::functional::mse_loss(net(std::get<0>(batch)), std::get<1>(batch)),
        train::LogOptions().sync_dist(true).prog_bar(true));
  }
  train::OptimizerConfig configure_optimizers() override {
    return {std::make_unique<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(lr_)), std::nullopt};
  }
  std::string checkpoint_name() const override { return "TabularRegressor"; }
  Regressor net;

 private:
  double lr_;
};

class WeatherData : public train::BasicDataModule<Rows> {
 public:
  WeatherData(std::string csv, int64_t batch) : csv_(std::move(csv)), batch_(batch) {}
  void setup() override { weather_ = Weather::load(csv_); }
  data::DataSource<Rows> train_data() override {
    return {rows(weather_.train_x, weather_.train_y), data::LoaderOptions(batch_).drop_last(true)};
  }
  std::optional<data::DataSource<Rows>> val_data() override {
    return data::DataSource<Rows>(rows(weather_.val_x, weather_.val_y), data::LoaderOptions(batch_))
        .shuffle(false);
  }
  const Weather& weather() const { return weather_; }

 private:
  std::string csv_;
  int64_t batch_;
  Weather weather_;
};

void fit_with_trainer(train::TrainerOptions options, int64_t batch,
                      const std::map<std::string, std::string>& extra) {
  WeatherData data(extra.at("csv"), batch);
  torch::manual_seed(0);  // the same initial weights whatever the world size (DDP broadcasts rank 0's)
  auto model = std::make_shared<LitRegressor>(examples::real_number("--lr", extra.at("lr")));
  train::Trainer trainer(options);
  const train::TrainerResult result = trainer.fit(model, data);
  if (trainer.rank() == 0 && !result.epochs.empty()) {
    std::printf(
        "tabular quality: val_mse %.4f baseline %.4f (°C², the baseline predicts the training mean), "
        "%lld step(s) on %d rank(s)\n",
        result.epochs.back().val_loss, data.weather().baseline_mse(),
        static_cast<long long>(result.global_step), trainer.world_size());
  }
}

// ---- Accelerate's style: the user's own loop, prepared

void fit_with_accelerator(const train::TrainerOptions& options, int64_t batch,
                          const std::map<std::string, std::string>& extra) {
  train::Accelerator accelerator(train::AcceleratorOptions().seed(options.seed()));
  const Weather weather = Weather::load(extra.at("csv"));
  torch::manual_seed(0);
  Regressor net;
  auto [model, optimizer, loader] = accelerator.prepare(
      net,
      torch::optim::Adam(net->parameters(),
                         torch::optim::AdamOptions(examples::real_number("--lr", extra.at("lr")))),
      data::DataSource<Rows>(rows(weather.train_x, weather.train_y),
                             data::LoaderOptions(batch).drop_last(true)));
  for (int64_t epoch = 0; epoch < options.max_epochs(); ++epoch) {
    loader.set_epoch(epoch);
    for (auto& [x, y] : loader) {
      auto scope = accelerator.accumulate(model);
      accelerator.backward(torch::nn::functional::mse_loss(model(x), y));
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  accelerator.wait_for_everyone();
  if (accelerator.is_main_process()) {
    torch::NoGradGuard no_grad;
    net->eval();
    const double val_mse = torch::nn::functional::mse_loss(net(weather.val_x), weather.val_y).item<double>();
    if (!options.ckpt_dir().empty()) {
      std::filesystem::create_directories(options.ckpt_dir());
      train::save_module_safetensors(
          (std::filesystem::path(options.ckpt_dir()) / "final.safetensors").string(), *net,
          {{"format", "pt"}});
    }
    accelerator.print("tabular quality: val_mse ", val_mse, " baseline ", weather.baseline_mse(),
                      " (°C², the baseline predicts the training mean), ", accelerator.step(), " step(s) on ",
                      accelerator.num_processes(), " rank(s)");
  }
  accelerator.end_training();
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_example("tabular", [&] {
    auto options = train::TrainerOptions().max_epochs(20).seed(1);
    int64_t batch = 32;
    const auto extra = examples::parse_flags(
        argc, argv, options, batch, {{"csv", kDefaultCsv}, {"lr", "0.01"}, {"style", "trainer"}}, "tabular");
    if (extra.at("style") == "trainer") {
      fit_with_trainer(options, batch, extra);
    } else if (extra.at("style") == "accelerate") {
      fit_with_accelerator(options, batch, extra);
    } else {
      throw std::invalid_argument("--style '" + extra.at("style") +
                                  "' is not known (expected trainer or accelerate)");
    }
  });
}
