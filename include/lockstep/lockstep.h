#pragma once

// lockstep's public API in one include: data-parallel training for LibTorch.
//
//   #include <lockstep/lockstep.h>
//
// Layers, bottom up (docs/architecture.md): env (who this process is), launch (starting ranks), comm
// (process groups and collectives), ddp (DistributedDataParallel), data (datasets, the sampler, the
// loader), models, optim, shard (ZeRO-1), train (the Trainer, callbacks, checkpoints, the Accelerator).
// Include a layer's own headers instead to compile less.

#include "lockstep/env/environment.h"
#include "lockstep/env/slurm.h"

#include "lockstep/launch/launch.h"

#include "lockstep/comm/backend.h"
#include "lockstep/comm/comm_error.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/comm/process_group_options.h"
#include "lockstep/comm/tcp_store.h"
#include "lockstep/comm/work.h"

#include "lockstep/ddp/comm_hook.h"
#include "lockstep/ddp/ddp_options.h"
#include "lockstep/ddp/distributed_data_parallel.h"

#include "lockstep/data/batch.h"
#include "lockstep/data/cifar10_dataset.h"
#include "lockstep/data/collate.h"
#include "lockstep/data/data_error.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/device_dataset.h"
#include "lockstep/data/distributed_sampler.h"
#include "lockstep/data/idx_dataset.h"
#include "lockstep/data/image_dataset.h"
#include "lockstep/data/iterable_dataset.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/shard_loader.h"
#include "lockstep/data/synthetic_dataset.h"
#include "lockstep/data/tensor_dataset.h"
#include "lockstep/data/torch_data.h"
#include "lockstep/data/transforms.h"

#include "lockstep/models/models.h"

#include "lockstep/optim/fused_adam.h"
#include "lockstep/optim/lr_schedule.h"

#include "lockstep/shard/zero_optimizer.h"

#include "lockstep/train/accelerator.h"
#include "lockstep/train/accelerator/accelerator_options.h"
#include "lockstep/train/accelerator/accumulate_guard.h"
#include "lockstep/train/accelerator/prepared_loader.h"
#include "lockstep/train/accelerator/prepared_model.h"
#include "lockstep/train/accelerator/prepared_optimizer.h"
#include "lockstep/train/batch_limit.h"
#include "lockstep/train/callback.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/device.h"
#include "lockstep/train/device_choice.h"
#include "lockstep/train/early_stopping.h"
#include "lockstep/train/lr_monitor.h"
#include "lockstep/train/model_checkpoint.h"
#include "lockstep/train/precision.h"
#include "lockstep/train/precision_mode.h"
#include "lockstep/train/preemption.h"
#include "lockstep/train/safetensors.h"
#include "lockstep/train/train_module.h"
#include "lockstep/train/trainer.h"
#include "lockstep/train/trainer_options.h"
