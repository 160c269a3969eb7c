// Pipeline parallelism (PipelineParallel) with ranks as threads over an in-memory store, in float64: GPipe
// and 1F1B over P = 1, 2, 4 stages with M = 1, 2, 8 micro-batches, alone and under data parallelism, end
// on the weights (and losses) of one process stepping on the whole global batch, for an Mlp and for a Gpt
// whose tied embedding lives on the first and the last stage; each stage holds the activations its
// schedule promises; bad input is refused.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "../comm/thread_group.h"
#include "../support/error_of.h"
#include "lockstep/comm/device_mesh.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/models/gpt.h"
#include "lockstep/models/mlp.h"
#include "lockstep/pipeline/pipeline_parallel.h"

namespace lockstep::pipeline {
namespace {

using lockstep::testing::lock_default_generator;
using lockstep::testing::run_group_ranks;

constexpr double kTolerance = 1e-12;
constexpr int kSteps = 3;
constexpr double kLr = 0.3;
constexpr int64_t kVocab = 16;
constexpr int64_t kLength = 8;

// A model under test: what the reference and each rank build, and how a batch is fed to it.
struct Subject {
  std::shared_ptr<torch::nn::Module> module;
  models::Staged* staged;
  PipelineParallel::Forward forward;
};

struct Data {
  std::vector<at::Tensor> inputs;  // one global batch per step
  std::vector<at::Tensor> targets;
};

// Mlp: 4 stages (fc1 .. fc4), no dropout. Gpt: 5 calls over 4 stage modules (the head is stage 0 again).
enum class Model { kMlp, kGpt };

Subject make_subject(Model kind) {
  auto lock = lock_default_generator(7);
  if (kind == Model::kMlp) {
    models::Mlp mlp(models::MlpOptions().in_features(6).hidden({8, 8, 8}).num_classes(3).dropout(0.0));
    mlp->to(at::kDouble);
    return {mlp.ptr(), mlp.get(), [mlp](const at::Tensor& x) mutable { return mlp->forward(x); }};
  }
  models::Gpt gpt(
      models::GptOptions::tiny().vocab_size(kVocab).context(kLength).heads(2).embedding(8).layers(2));
  gpt->to(at::kDouble);
  return {gpt.ptr(), gpt.get(), [gpt](const at::Tensor& x) mutable { return gpt->forward(x); }};
}

at::Tensor loss_of(Model kind, const at::Tensor& out, const at::Tensor& target) {
  namespace F = torch::nn::functional;
  if (kind == Model::kMlp) return F::cross_entropy(out, target);
  return F::cross_entropy(out.reshape({-1, kVocab}), target.reshape({-1}));
}

Data make_data(Model kind, int64_t rows) {
  auto lock = lock_default_generator(8);
  Data data;
  for (int step = 0; step < kSteps; ++step) {
    if (kind == Model::kMlp) {
      data.inputs.push_back(at::randn({rows, 6}, at::kDouble));
      data.targets.push_back(at::randint(3, {rows}, at::kLong));
    } else {
      const at::Tensor tokens = at::randint(kVocab, {rows, kLength + 1}, at::kLong);
      data.inputs.push_back(tokens.slice(1, 0, kLength));
      data.targets.push_back(tokens.slice(1, 1));
    }
  }
  return data;
}

void sgd(const std::vector<at::Tensor>& parameters) {
  at::NoGradGuard no_grad;
  for (const at::Tensor& p : parameters) {
    at::Tensor param = p;
    param.sub_(p.grad() * kLr);
    param.mutable_grad().zero_();
  }
}

// One process on the whole global batch: its losses, and its stage modules' parameters at the end.
struct Reference {
  std::vector<double> losses;
  std::vector<std::vector<at::Tensor>> stage_parameters;  // by stage module
};

Reference train_reference(Model kind, const Data& data) {
  Subject subject = make_subject(kind);
  Reference ref;
  for (int step = 0; step < kSteps; ++step) {
    const at::Tensor loss = loss_of(kind, subject.forward(data.inputs[step]), data.targets[step]);
    loss.backward();
    ref.losses.push_back(loss.item<double>());
    sgd(subject.module->parameters());
  }
  for (const auto& module : subject.staged->stage_modules()) {
    std::vector<at::Tensor> ps;
    for (const auto& p : module->parameters()) ps.push_back(p.detach().clone());
    ref.stage_parameters.push_back(ps);
  }
  return ref;
}

const char* model_name(Model kind) {
  return kind == Model::kMlp ? "Mlp" : "Gpt";
}

// `data_parallel` × `stages` ranks on a DeviceMesh (rank = d * stages + s): each pipeline takes its
// data-parallel rank's rows of the global batch; the stages' gradients are averaged over the data-parallel
// group before each step.
void expect_like_one_process(Model kind, int data_parallel, int stages, int micro_batches,
                             Schedule schedule) {
  SCOPED_TRACE(std::string(model_name(kind)) + " dp " + std::to_string(data_parallel) + " pp " +
               std::to_string(stages) + " M " + std::to_string(micro_batches) + " " + to_string(schedule));
  constexpr int64_t kRows = 8;  // per data-parallel rank
  const Data data = make_data(kind, kRows * data_parallel);
  const Reference reference = train_reference(kind, data);
  const int world = data_parallel * stages;
  std::vector<Subject> subjects;  // built here: the default generator is not for threads to share
  for (int r = 0; r < world; ++r) subjects.push_back(make_subject(kind));

  run_group_ranks(world, "pipeline", [&](int rank, comm::ProcessGroup& group) {
    comm::DeviceMesh mesh(group, /*tensor_parallel=*/1, stages);
    comm::ProcessGroup& dp = mesh.dp();
    Subject& subject = subjects[static_cast<size_t>(rank)];
    PipelineParallel pipe(subject.module, *subject.staged, mesh.pp(), {schedule, micro_batches, {}});
    const int s = pipe.stage();
    for (int step = 0; step < kSteps; ++step) {
      const at::Tensor rows = data.inputs[step].narrow(0, dp.rank() * kRows, kRows);
      const at::Tensor targets = data.targets[step].narrow(0, dp.rank() * kRows, kRows);
      at::Tensor loss = at::full({1},
                                 pipe.forward_backward(rows, targets, subject.forward,
                                                       [&](const at::Tensor& out, const at::Tensor& t) {
                                                         return loss_of(kind, out, t);
                                                       }),
                                 at::kDouble);
      std::vector<at::Tensor> grads;
      for (const at::Tensor& p : pipe.parameters()) grads.push_back(p.grad());
      dp.all_reduce(grads, comm::ReduceOp::kAvg).wait();
      dp.all_reduce(loss, comm::ReduceOp::kAvg).wait();
      EXPECT_NEAR(loss.item<double>(), reference.losses[step], kTolerance)
          << "rank " << rank << " step " << step;
      sgd(pipe.parameters());
    }
    const int expected_peak =
        schedule == Schedule::kGPipe ? micro_batches : std::min(micro_batches, stages - s);
    EXPECT_EQ(pipe.peak_micro_batches(), expected_peak) << "stage " << s;
    const auto modules = subject.staged->stage_modules();
    int held = 0;
    for (size_t m = 0; m < modules.size(); ++m) {
      if (!pipe.holds(m)) continue;
      ++held;
      const auto ps = modules[m]->parameters();
      for (size_t i = 0; i < ps.size(); ++i) {
        EXPECT_LT((ps[i] - reference.stage_parameters[m][i]).abs().max().item<double>(), kTolerance)
            << "stage module " << m << " parameter " << i << " on rank " << rank;
      }
    }
    EXPECT_GT(held, 0) << "rank " << rank << " holds no stage";
    pipe.shutdown();
    mesh.shutdown();
  });
}

using Shape = std::tuple<int, int, Schedule>;  // stages, micro-batches, schedule

class PipelineShape : public ::testing::TestWithParam<Shape> {};

TEST_P(PipelineShape, StepsEqualOneProcessOnTheWholeBatch) {
  const auto [stages, micro_batches, schedule] = GetParam();
  for (Model kind : {Model::kMlp, Model::kGpt})
    expect_like_one_process(kind, 1, stages, micro_batches, schedule);
}

INSTANTIATE_TEST_SUITE_P(Pipelines, PipelineShape,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Values(1, 2, 8),
                                            ::testing::Values(Schedule::kGPipe, Schedule::k1F1B)),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "P" + std::to_string(std::get<0>(info.param)) + "_M" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  to_string(std::get<2>(info.param));
                         });

// 2 data-parallel pipelines of 2 stages, and 2 of 4: the gradients averaged over the data-parallel group.
TEST(PipelineComposed, DataTimesPipelineParallelEqualsOneProcess) {
  for (Schedule schedule : {Schedule::kGPipe, Schedule::k1F1B}) {
    for (Model kind : {Model::kMlp, Model::kGpt}) {
      expect_like_one_process(kind, 2, 2, 2, schedule);
      expect_like_one_process(kind, 2, 4, 8, schedule);
    }
  }
}

// 8 rows in 3 micro-batches (3, 3, 2): each micro-batch's mean loss weighs by its share of the batch.
TEST(PipelineUneven, MicroBatchesOfDifferentSizesWeighByTheirSize) {
  for (Schedule schedule : {Schedule::kGPipe, Schedule::k1F1B}) {
    for (Model kind : {Model::kMlp, Model::kGpt}) expect_like_one_process(kind, 1, 2, 3, schedule);
  }
}

// The gradients of the stage modules `pipe` holds on `rank` are those of one process's `reference` modules.
void expect_gradients_of(const std::vector<std::shared_ptr<torch::nn::Module>>& reference, Subject& subject,
                         const PipelineParallel& pipe, int rank) {
  const auto modules = subject.staged->stage_modules();
  for (size_t m = 0; m < modules.size(); ++m) {
    if (!pipe.holds(m)) continue;
    const auto ps = modules[m]->parameters();
    const auto expected = reference[m]->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_LT((ps[i].grad() - expected[i].grad()).abs().max().item<double>(), kTolerance)
          << "stage module " << m << " parameter " << i << " on rank " << rank;
    }
  }
}

// Clipping over the stages: the norm of the whole model (Gpt's tied embedding counted once) and the clipped
// gradients are torch::nn::utils::clip_grad_norm_'s on one process, on P = 2 and 4, clipping and not.
TEST(PipelineClip, TheWholeModelsNormAndGradientsAreOneProcesss) {
  for (Model kind : {Model::kMlp, Model::kGpt}) {
    for (int stages : {2, 4}) {
      for (double max_norm : {0.05, 1e6}) {
        SCOPED_TRACE(std::string(model_name(kind)) + " P " + std::to_string(stages) + " max_norm " +
                     std::to_string(max_norm));
        const Data data = make_data(kind, 8);
        Subject reference = make_subject(kind);
        loss_of(kind, reference.forward(data.inputs[0]), data.targets[0]).backward();
        const double reference_norm =
            torch::nn::utils::clip_grad_norm_(reference.module->parameters(), max_norm);
        const auto reference_modules = reference.staged->stage_modules();
        std::vector<Subject> subjects;
        for (int r = 0; r < stages; ++r) subjects.push_back(make_subject(kind));
        run_group_ranks(stages, "pipeline-clip", [&](int rank, comm::ProcessGroup& group) {
          Subject& subject = subjects[static_cast<size_t>(rank)];
          PipelineParallel pipe(subject.module, *subject.staged, group, {Schedule::k1F1B, 2, {}});
          pipe.forward_backward(
              data.inputs[0], data.targets[0], subject.forward,
              [&](const at::Tensor& out, const at::Tensor& t) { return loss_of(kind, out, t); });
          EXPECT_NEAR(pipe.clip_grad_norm(max_norm), reference_norm, kTolerance) << "rank " << rank;
          expect_gradients_of(reference_modules, subject, pipe, rank);
        });
      }
    }
  }
}

// Between gathers a stage keeps only its own stage modules' parameters; gather_whole: after training, every
// stage's copy of the whole model (the stages it does not hold too) is one process's; Gpt's tied embedding
// comes from stage 0.
TEST(PipelineGatherWhole, EveryStageEndsWithTheWholeModelOfOneProcess) {
  for (Model kind : {Model::kMlp, Model::kGpt}) {
    for (int stages : {2, 4}) {
      SCOPED_TRACE(std::string(model_name(kind)) + " P " + std::to_string(stages));
      const Data data = make_data(kind, 8);
      const Reference reference = train_reference(kind, data);
      std::vector<Subject> subjects;
      for (int r = 0; r < stages; ++r) subjects.push_back(make_subject(kind));
      run_group_ranks(stages, "pipeline-gather", [&](int rank, comm::ProcessGroup& group) {
        Subject& subject = subjects[static_cast<size_t>(rank)];
        PipelineParallel pipe(subject.module, *subject.staged, group, {Schedule::kGPipe, 2, {}});
        for (int step = 0; step < kSteps; ++step) {
          pipe.forward_backward(
              data.inputs[step], data.targets[step], subject.forward,
              [&](const at::Tensor& out, const at::Tensor& t) { return loss_of(kind, out, t); });
          sgd(pipe.parameters());
        }
        const auto modules = subject.staged->stage_modules();
        EXPECT_TRUE(pipe.released());  // between gathers, only this stage's parameters take memory
        for (size_t m = 0; m < modules.size(); ++m) {
          for (const auto& p : modules[m]->parameters())
            EXPECT_EQ(p.numel() > 0, pipe.holds(m)) << "stage module " << m << " on rank " << rank;
        }
        pipe.gather_whole();
        EXPECT_FALSE(pipe.released());
        for (size_t m = 0; m < modules.size(); ++m) {
          const auto ps = modules[m]->parameters();
          for (size_t i = 0; i < ps.size(); ++i) {
            EXPECT_LT((ps[i] - reference.stage_parameters[m][i]).abs().max().item<double>(), kTolerance)
                << "stage module " << m << " parameter " << i << " on rank " << rank;
          }
        }
      });
    }
  }
}

// Two calls before a step accumulate as two backward passes of one process do: the tied embedding's
// gradient, summed over its two stages after each call, is not summed again.
TEST(PipelineAccumulation, TwoCallsAccumulateAsTwoBackwardPassesOfOneProcess) {
  const Data data = make_data(Model::kGpt, 8);
  Subject reference = make_subject(Model::kGpt);
  for (int half = 0; half < 2; ++half) {
    loss_of(Model::kGpt, reference.forward(data.inputs[0].narrow(0, 4 * half, 4)),
            data.targets[0].narrow(0, 4 * half, 4))
        .backward();
  }
  const auto reference_modules = reference.staged->stage_modules();
  std::vector<Subject> subjects{make_subject(Model::kGpt), make_subject(Model::kGpt)};
  run_group_ranks(2, "pipeline-accumulate", [&](int rank, comm::ProcessGroup& group) {
    Subject& subject = subjects[static_cast<size_t>(rank)];
    PipelineParallel pipe(subject.module, *subject.staged, group, {Schedule::k1F1B, 2, {}});
    for (int half = 0; half < 2; ++half) {
      pipe.forward_backward(
          data.inputs[0].narrow(0, 4 * half, 4), data.targets[0].narrow(0, 4 * half, 4), subject.forward,
          [&](const at::Tensor& out, const at::Tensor& t) { return loss_of(Model::kGpt, out, t); });
    }
    expect_gradients_of(reference_modules, subject, pipe, rank);
  });
}

// A step that fails part-way (here the forward of micro-batch 1 throws on every stage) fails on every stage
// within the collective timeout, and the pipeline refuses to run again, naming the fix.
TEST(PipelineFailure, AFailedStepFailsEveryStageAndTheNextCallIsRefused) {
  using namespace std::chrono_literals;
  std::vector<Subject> subjects{make_subject(Model::kMlp), make_subject(Model::kMlp)};
  auto store = c10::make_intrusive<c10d::HashStore>();
  lockstep::testing::expect_all_ok(lockstep::testing::run_ranks(2, [&](int rank) {
    auto group = comm::init_process_group(
        lockstep::testing::thread_group_options(rank, 2, store, "pipeline-failure").collective_timeout(2s));
    Subject& subject = subjects[static_cast<size_t>(rank)];
    {
      PipelineParallel pipe(subject.module, *subject.staged, group, {Schedule::k1F1B, 2, {}});
      int calls = 0;
      const auto failing = [&](const at::Tensor& x) {
        if (++calls == 2) throw std::runtime_error("injected failure");
        return subject.forward(x);
      };
      const auto loss = [](const at::Tensor& out, const at::Tensor& t) {
        return loss_of(Model::kMlp, out, t);
      };
      const at::Tensor x = at::randn({4, 6}, at::kDouble);
      const at::Tensor y = at::zeros({4}, at::kLong);
      EXPECT_ANY_THROW(pipe.forward_backward(x, y, failing, loss)) << "rank " << rank;
      try {
        pipe.forward_backward(x, y, subject.forward, loss);
        ADD_FAILURE() << "a pipeline ran again after a failed step on rank " << rank;
      } catch (const std::logic_error& e) {
        EXPECT_NE(std::string(e.what()).find("build a new PipelineParallel"), std::string::npos) << e.what();
      }
    }
    group.shutdown();  // waits (up to the rendezvous timeout) for the stage still in its failing receive
  }));
}

// The cut: Gpt's five calls (embeddings, 2 blocks, ln_f, tied head) balanced by parameters put the embedding
// on the first and the last stage; a user's cut is taken as given; a bad one names itself.
TEST(PipelineCut, GptsTiedEmbeddingIsOnTheFirstAndLastStage) {
  std::vector<Subject> subjects{make_subject(Model::kGpt), make_subject(Model::kGpt)};
  run_group_ranks(2, "pipeline-cut", [&](int rank, comm::ProcessGroup& group) {
    Subject& subject = subjects[static_cast<size_t>(rank)];
    {
      PipelineParallel pipe(subject.module, *subject.staged, group, {Schedule::k1F1B, 1, {}});
      EXPECT_TRUE(pipe.holds(0)) << "rank " << rank;  // the embeddings, and the head
      EXPECT_EQ(pipe.bounds().front(), 0u);
      EXPECT_EQ(pipe.bounds().back(), 5u);
    }
    {
      PipelineParallel pipe(subject.module, *subject.staged, group, {Schedule::k1F1B, 1, {4}});
      EXPECT_EQ(pipe.bounds(), (std::vector<size_t>{0, 4, 5}));
      EXPECT_EQ(pipe.holds(3), rank == 0);  // ln_f
      EXPECT_EQ(pipe.holds(1), rank == 0);
      EXPECT_TRUE(pipe.holds(0));
    }
    const std::string error = lockstep::testing::invalid_argument_of([&] {
      PipelineParallel pipe(subject.module, *subject.staged, group, {Schedule::k1F1B, 1, {5}});
    });
    EXPECT_NE(error.find("cut value 5"), std::string::npos) << error;
  });
}

TEST(PipelineInput, ASmallBatchRunsOneMicroBatchPerSampleAndBadInputIsRefused) {
  std::vector<Subject> subjects{make_subject(Model::kMlp), make_subject(Model::kMlp)};
  Subject reference = make_subject(Model::kMlp);
  const Data data = make_data(Model::kMlp, 3);
  const double expected =
      loss_of(Model::kMlp, reference.forward(data.inputs[0]), data.targets[0]).item<double>();
  run_group_ranks(2, "pipeline-input", [&](int rank, comm::ProcessGroup& group) {
    Subject& subject = subjects[static_cast<size_t>(rank)];
    const std::string none = lockstep::testing::invalid_argument_of([&] {
      PipelineParallel pipe(subject.module, *subject.staged, group, {Schedule::kGPipe, 0, {}});
    });
    EXPECT_NE(none.find("micro_batches must be >= 1, got 0"), std::string::npos) << none;
    PipelineParallel pipe(subject.module, *subject.staged, group, {Schedule::kGPipe, 4, {}});
    const auto loss = [](const at::Tensor& out, const at::Tensor& t) { return loss_of(Model::kMlp, out, t); };
    // 3 samples, 4 micro-batches: 3 of one sample each (an epoch's short last batch).
    EXPECT_NEAR(pipe.forward_backward(data.inputs[0], data.targets[0], subject.forward, loss), expected,
                kTolerance);
    EXPECT_EQ(pipe.peak_micro_batches(), 3) << "rank " << rank;
    const std::string mismatched = lockstep::testing::invalid_argument_of([&] {
      pipe.forward_backward(at::zeros({3, 6}, at::kDouble), at::zeros({2}, at::kLong), subject.forward, loss);
    });
    EXPECT_NE(mismatched.find("a batch of 3 inputs and 2 targets"), std::string::npos) << mismatched;
  });
}

}  // namespace
}  // namespace lockstep::pipeline
