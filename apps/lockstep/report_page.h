#pragma once

#include <filesystem>
#include <string>

#include "report_run.h"

namespace lockstep::cli {

/*
 * `lockstep report`'s page: one self-contained HTML file (inline CSS and SVG, no script, nothing loaded
 * from the network). Sections, each left out when the run has nothing for it:
 *   summary      epochs, steps, the last epoch's losses and accuracy, median throughput
 *   training     loss over step (train_loss_step, train_loss_epoch and val_loss at their steps), val_acc
 *                over epoch, lr over step
 *   performance  time/samples_per_s, time/epoch_s and time/val_s, every memory/ key over epoch
 *   breakdown    the last epoch's breakdown/rank_R/P_ms as one stacked bar per rank, the slowest rank and
 *                its excess over the median rank (flagged above 20%), step_ms per rank over epoch
 *   other        every key the report does not know, one chart each over step (users log their own)
 *   scaling      scaling.csv as a table, efficiency and speedup over ranks
 *   peer         peer.csv as a table, the epoch times of both sides over epoch
 *   config       hparams.yaml as a table
 */

/// The report of `run` as HTML.
std::string render_report(const RunData& run);

/// Writes `html` to `path` atomically: into a temporary file next to it, then renamed over it, so a reader
/// never sees half a report and a failure leaves nothing behind. Throws ReportError naming the path and
/// the reason (a directory, no such directory, no permission) with the fix.
void write_report(const std::filesystem::path& path, const std::string& html);

}  // namespace lockstep::cli
