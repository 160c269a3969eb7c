#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/env/environment.h"
#include "lockstep/train/callback.h"
#include "lockstep/train/epoch_metrics.h"
#include "lockstep/train/fit_config.h"

namespace lockstep::train {

/// Where rank 0 speaks. Other ranks print nothing (errors travel as exceptions).
struct FitOutput {
  std::FILE* out = stdout;    ///< per-epoch lines and the final summary
  bool progress_bar = false;  ///< draw a live bar on `out` (only sensible on a terminal)
};

/// What a run produced (the same on every rank, reduced over all of them).
struct FitResult {
  std::vector<EpochMetrics> epochs;
  std::string weights_path;      ///< the final weights, when --ckpt-dir was given
  std::string safetensors_path;  ///< the same weights as safetensors (final.safetensors), with --ckpt-dir
  /// SIGUSR1/SIGTERM stopped the run at a step boundary after writing last.ckpt (see TrainerResult).
  bool preempted = false;
};

/// One rank of `lockstep fit`: loads the data, builds the model, joins the process group described by
/// `environment` (every rank calls fit with the same config), wraps the model in DistributedDataParallel
/// and trains `config.max_epochs` epochs: per epoch a DistributedSampler shuffle, training with
/// overlapped gradient all-reduce, validation over the test set (each image counted once whatever
/// the world size), metrics reduced over all ranks; rank 0 prints them, appends them to
/// `config.metrics_file` and at the end saves the weights atomically to `config.ckpt_dir`/final.pt
/// (LibTorch's archive) and `config.ckpt_dir`/final.safetensors (parameters and buffers, for Python).
///
/// Throws std::invalid_argument for a bad config or a config that contradicts the environment
/// (e.g. --devices 4 under a launcher that started 2), lockstep::data::DataError for bad data,
/// lockstep::comm::CommError when a collective fails or times out. Blocks until done.
///
/// Example (one rank under `lockstep run` or srun):
///   FitConfig config;
///   config.model = "cnn";
///   config.max_epochs = 15;
///   FitResult result = fit(config, lockstep::env::from_env());
///
/// `callbacks` run after the ones the config asks for (lockstep-fit adds its fault injection there).
FitResult fit(const FitConfig& config, const env::Environment& environment, const FitOutput& output = {},
              const std::vector<std::shared_ptr<Callback>>& callbacks = {});

}  // namespace lockstep::train
