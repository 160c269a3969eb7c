#pragma once

// lockstep::log, the run directory and its loggers, free of LibTorch:
//   ROOT/lightning_logs/version_N/{hparams.yaml, metrics.csv, metrics.jsonl, events.out.tfevents.*}
// (docs/logging.md).

#include "lockstep/log/crc32c.h"
#include "lockstep/log/csv_logger.h"
#include "lockstep/log/event_proto.h"
#include "lockstep/log/hparams_yaml.h"
#include "lockstep/log/jsonl_logger.h"
#include "lockstep/log/logger.h"
#include "lockstep/log/make_loggers.h"
#include "lockstep/log/run_dir.h"
#include "lockstep/log/tensorboard_logger.h"
#include "lockstep/log/tfrecord_writer.h"
