#pragma once

#include <string>
#include <vector>

namespace lockstep::cli {

/*
 * The report's charts: inline SVG, drawn here without any script, so the HTML file needs nothing else.
 *
 * Every chart is a <figure class="chart" data-points="N"> whose SVG holds exactly N elements of class
 * "pt" (a <circle> per point of a line chart, a <rect> per segment of a bar chart), each with data-series,
 * data-x and data-y attributes and a <title> (the browser's tooltip): a test can count the points, and a
 * reader can hover over them. Axes get "nice" ticks (1, 2 or 5 times a power of ten, about five per axis;
 * whole numbers only when every x is whole, such as epochs and rank counts), a label with the unit, and a
 * legend names each series above the plot. All text from the run's files is HTML-escaped.
 */

struct Point {
  double x = 0;
  double y = 0;
};

/// One line of a LineChart: its points (drawn in the order given, as a line through markers).
struct Series {
  std::string name;
  std::vector<Point> points;
};

struct LineChart {
  std::string id;  ///< the figure's id (unique in the page)
  std::string title;
  std::string x_label;  ///< with the unit, e.g. "step" or "ranks"
  std::string y_label;  ///< with the unit, e.g. "loss" or "samples/s"
  std::vector<Series> series;
  /// Dashed lines for comparison (e.g. ideal speedup), drawn without markers: not data points.
  std::vector<Series> references;
  bool y_from_zero = false;  ///< start the y axis at 0 (throughput, memory, %)
};

/// One bar per category, stacked from `segments`: values[bar][segment], all >= 0.
struct StackedBars {
  std::string id;
  std::string title;
  std::string y_label;
  std::vector<std::string> bars;      ///< e.g. "rank 0", "rank 1"
  std::vector<std::string> segments;  ///< e.g. "data", "forward", ...
  std::vector<std::vector<double>> values;
  std::vector<std::string> bar_notes;  ///< optional text above each bar (e.g. its total); empty: none
};

/// The number of data points a chart draws (the figure's data-points).
int data_point_count(const LineChart& chart);
int data_point_count(const StackedBars& chart);

/// True when the chart has nothing to draw (the report leaves such charts out).
bool empty(const LineChart& chart);

/// The chart as an HTML <figure> holding an inline SVG (see the comment above).
std::string render_chart(const LineChart& chart);
std::string render_chart(const StackedBars& chart);

/// Tick positions covering [lo, hi]: about `target` steps of 1, 2 or 5 times a power of ten (at least 1
/// when `whole` is set). The first tick is <= lo and the last >= hi; lo == hi gets a range around it.
std::vector<double> nice_ticks(double lo, double hi, int target, bool whole);

/// A number for a label: a whole number as it is ("12000", not 1.2e+04), else up to 4 significant digits
/// without trailing zeros ("0.25", "1.5e-05").
std::string format_number(double value);

}  // namespace lockstep::cli
