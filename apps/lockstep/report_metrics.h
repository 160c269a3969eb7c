#pragma once

#include <optional>
#include <string>
#include <vector>

#include "report_chart.h"
#include "report_csv.h"

namespace lockstep::cli {

/// The scalars a logger wrote, as a table: one column per key (in the order the keys first appear), one
/// row per log call, a cell absent where that call did not log the key (Lightning's CSVLogger leaves the
/// cell empty; a metrics.jsonl object lacks the key). Cells that are not finite numbers (text, nan, inf)
/// are absent too: the report draws numbers.
struct MetricLog {
  std::vector<std::string> keys;
  std::vector<std::vector<std::optional<double>>> rows;

  /// The column of `key`; -1 when no row has that key.
  int column(const std::string& key) const;

  /// (x, y) of every row that has both keys, in file order. With an empty `x_key`, x is the row's index.
  std::vector<Point> points(const std::string& x_key, const std::string& y_key) const;

  /// The index of the last row that has `key`; -1 when none has.
  int last_row_with(const std::string& key) const;
};

/// metrics.csv (Lightning's CSVLogger format: a header of every key, empty cells) as a MetricLog.
MetricLog metrics_from_csv(const CsvTable& table);

/// metrics.jsonl (one JSON object per log call, {"step":S, "epoch":E, "<key>":v, ...}) as a MetricLog: a
/// key first seen in a later object widens the table, the earlier rows lack it. Blank lines are skipped.
/// Throws std::runtime_error naming `source` and the line for a line that is not a JSON object.
MetricLog parse_metrics_jsonl(const std::string& text, const std::string& source);

}  // namespace lockstep::cli
