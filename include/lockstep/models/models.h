#pragma once

/// The models layer: ready image classifiers behind one interface (ClassifierImpl) and a factory, and a
/// language model.
///   Mlp       — the seeds' MLP 784-256-128-10 (ReLU, dropout 0.2)
///   SmallCnn  — three convolutions, < 100k parameters
///   ResNet18  — CIFAR-style ResNet18, 11.2M parameters
///   make_model("mlp" | "cnn" | "resnet18", InputShape)
///   Gpt       — GPT-2's decoder-only transformer, head tied to the embedding (GptOptions::tiny(), 120k
///               parameters; GptOptions::gpt2_small(), 124M); not a ClassifierImpl, not in make_model
///   ColumnParallelLinear, RowParallelLinear — Megatron's tensor-parallel linear layers over a
///               comm::ProcessGroup, and their region functions (copy_to / reduce_from / gather_from /
///               scatter_to_tensor_parallel_region)

#include "lockstep/models/classifier.h"
#include "lockstep/models/gpt.h"
#include "lockstep/models/mlp.h"
#include "lockstep/models/parallel_linear.h"
#include "lockstep/models/resnet18.h"
#include "lockstep/models/small_cnn.h"
