// The report's inline SVG charts (report_chart.h).
#include "report_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report_html.h"

namespace lockstep::cli {
namespace {

constexpr double kWidth = 600;
constexpr double kLeft = 74;  // room for the y tick labels and the y axis label
constexpr double kRight = 20;
constexpr double kBottom = 52;  // x tick labels and the x axis label
constexpr double kPlotHeight = 230;
constexpr double kLegendLine = 18;
constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1",
                                   "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac"};

std::string color(size_t i) {
  return kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
}

std::string num(double value) {  // coordinates
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1f", value);
  return buffer;
}

std::string exact(double value) {  // data-x, data-y
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.10g", value);
  return buffer;
}

// The legend's entries laid out in lines across the chart's width: (x, line) of each.
struct LegendLayout {
  std::vector<std::pair<double, int>> places;
  int lines = 0;
};

LegendLayout layout_legend(const std::vector<std::string>& names) {
  LegendLayout layout;
  double x = kLeft;
  layout.lines = names.empty() ? 0 : 1;
  for (const std::string& name : names) {
    const double width = 40 + 7.4 * static_cast<double>(name.size());
    if (x + width > kWidth - kRight && x > kLeft) {
      x = kLeft;
      ++layout.lines;
    }
    layout.places.emplace_back(x, layout.lines - 1);
    x += width;
  }
  return layout;
}

// An entry: a swatch (a line, dashed for a reference, or a block for a bar segment) and the name.
std::string legend_entry(double x, double y, const std::string& name, const std::string& paint,
                         const std::string& kind) {
  std::string out;
  if (kind == "block") {
    out += "<rect x=\"" + num(x) + "\" y=\"" + num(y - 9) + "\" width=\"18\" height=\"10\" fill=\"" + paint +
           "\"/>";
  } else {
    out += "<line x1=\"" + num(x) + "\" y1=\"" + num(y - 4) + "\" x2=\"" + num(x + 18) + "\" y2=\"" +
           num(y - 4) + "\" stroke=\"" + paint + "\" stroke-width=\"2.5\"" +
           (kind == "dashed" ? " stroke-dasharray=\"5 3\"" : "") + "/>";
  }
  return out + "<text x=\"" + num(x + 23) + "\" y=\"" + num(y) + "\" class=\"legend\">" + html_escape(name) +
         "</text>";
}

// The frame of a chart: the figure, the SVG, the title, the legend; returns the plot's top edge.
struct Frame {
  std::string head;
  double top = 0;
  double height = 0;
};

Frame open_frame(const std::string& id, const std::string& title, int points,
                 const std::vector<std::string>& names, const std::vector<std::string>& paints,
                 const std::vector<std::string>& kinds) {
  const LegendLayout legend = layout_legend(names);
  Frame frame;
  frame.top = 34 + kLegendLine * legend.lines + 8;
  frame.height = frame.top + kPlotHeight + kBottom;
  frame.head = "<figure class=\"chart\" id=\"" + html_escape(id) + "\" data-points=\"" +
               std::to_string(points) + "\">\n<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " +
               num(kWidth) + " " + num(frame.height) + "\" role=\"img\" aria-label=\"" + html_escape(title) +
               "\">\n" + "<text x=\"" + num(kWidth / 2) + "\" y=\"20\" class=\"title\">" +
               html_escape(title) + "</text>\n";
  for (size_t i = 0; i < names.size(); ++i) {
    const double y = 34 + kLegendLine * legend.places[i].second + 10;
    frame.head += legend_entry(legend.places[i].first, y, names[i], paints[i], kinds[i]) + "\n";
  }
  return frame;
}

// Maps data values onto the plot: [lo, hi] of the ticks onto the plot's pixel span.
struct Scale {
  double lo, hi, from, to;
  double operator()(double v) const { return from + (v - lo) / (hi - lo) * (to - from); }
};

// The y grid with its tick labels, the axis label, and the x axis line.
std::string y_axis(const std::vector<double>& ticks, const Scale& y, const std::string& label, double top) {
  std::string out;
  for (const double t : ticks) {
    out += "<line class=\"grid\" x1=\"" + num(kLeft) + "\" x2=\"" + num(kWidth - kRight) + "\" y1=\"" +
           num(y(t)) + "\" y2=\"" + num(y(t)) + "\"/><text class=\"tick\" x=\"" + num(kLeft - 6) + "\" y=\"" +
           num(y(t) + 4) + "\" text-anchor=\"end\">" + format_number(t) + "</text>\n";
  }
  const double middle = top + kPlotHeight / 2;
  out += "<text class=\"axis-label\" transform=\"translate(16 " + num(middle) + ") rotate(-90)\">" +
         html_escape(label) + "</text>\n";
  out += "<line class=\"axis\" x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft) + "\" y1=\"" + num(top) +
         "\" y2=\"" + num(top + kPlotHeight) + "\"/><line class=\"axis\" x1=\"" + num(kLeft) + "\" x2=\"" +
         num(kWidth - kRight) + "\" y1=\"" + num(top + kPlotHeight) + "\" y2=\"" + num(top + kPlotHeight) +
         "\"/>\n";
  return out;
}

std::string x_label(const std::string& label, double top) {
  return "<text class=\"axis-label\" x=\"" + num(kLeft + (kWidth - kLeft - kRight) / 2) + "\" y=\"" +
         num(top + kPlotHeight + 42) + "\">" + html_escape(label) + "</text>\n";
}

std::string tick_below(double x, double top, const std::string& text) {
  return "<text class=\"tick\" x=\"" + num(x) + "\" y=\"" + num(top + kPlotHeight + 18) +
         "\" text-anchor=\"middle\">" + html_escape(text) + "</text>\n";
}

std::string polyline(const Series& series, const Scale& x, const Scale& y, const std::string& paint,
                     bool dashed) {
  std::string out = "<polyline fill=\"none\" stroke=\"" + paint + "\" stroke-width=\"" +
                    (dashed ? "1.5" : "2") + "\"" + (dashed ? " stroke-dasharray=\"5 3\"" : "") +
                    " points=\"";
  for (const Point& p : series.points) out += num(x(p.x)) + "," + num(y(p.y)) + " ";
  return out + "\"/>\n";
}

std::string markers(const Series& series, const Scale& x, const Scale& y, const std::string& paint) {
  const std::string radius = series.points.size() > 60 ? "1.8" : "3.5";
  std::string out;
  for (const Point& p : series.points) {
    out += "<circle class=\"pt\" cx=\"" + num(x(p.x)) + "\" cy=\"" + num(y(p.y)) + "\" r=\"" + radius +
           "\" fill=\"" + paint + "\" data-series=\"" + html_escape(series.name) + "\" data-x=\"" +
           exact(p.x) + "\" data-y=\"" + exact(p.y) + "\"><title>" + html_escape(series.name) + ": " +
           format_number(p.y) + " at " + format_number(p.x) + "</title></circle>\n";
  }
  return out;
}

}  // namespace

int data_point_count(const LineChart& chart) {
  int count = 0;
  for (const Series& s : chart.series) count += static_cast<int>(s.points.size());
  return count;
}

int data_point_count(const StackedBars& chart) {
  return static_cast<int>(chart.bars.size() * chart.segments.size());
}

bool empty(const LineChart& chart) {
  return data_point_count(chart) == 0;
}

std::vector<double> nice_ticks(double lo, double hi, int target, bool whole) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = hi = 0;  // no finite range: one unit around 0
  if (!(hi > lo)) {
    const double pad = whole || lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(target, 1);
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
  if (whole && step < 1) step = 1;
  const double first = std::floor(lo / step + 1e-9) * step;
  std::vector<double> ticks;
  for (int i = 0;; ++i) {
    const double t = first + i * step;
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
    if (t >= hi - step * 1e-9) break;
  }
  return ticks;
}

std::string format_number(double value) {
  char buffer[32];
  if (value == std::round(value) && std::fabs(value) < 1e9) {
    std::snprintf(buffer, sizeof(buffer), "%.0f", value);  // 12000, not 1.2e+04
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.4g", value);
  }
  return buffer;
}

std::string render_chart(const LineChart& chart) {
  std::vector<std::string> names, paints, kinds;
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  bool whole_x = true;
  const auto add = [&](const Series& s, const std::string& paint, const std::string& kind) {
    names.push_back(s.name);
    paints.push_back(paint);
    kinds.push_back(kind);
    for (const Point& p : s.points) {
      x_lo = std::min(x_lo, p.x), x_hi = std::max(x_hi, p.x);
      y_lo = std::min(y_lo, p.y), y_hi = std::max(y_hi, p.y);
      whole_x = whole_x && p.x == std::floor(p.x);
    }
  };
  for (size_t i = 0; i < chart.series.size(); ++i) add(chart.series[i], color(i), "line");
  for (const Series& s : chart.references) add(s, "#888888", "dashed");
  if (chart.y_from_zero) y_lo = std::min(y_lo, 0.0);
  Frame frame = open_frame(chart.id, chart.title, data_point_count(chart), names, paints, kinds);
  if (!(x_lo <= x_hi)) return frame.head + "</svg>\n</figure>\n";

  const std::vector<double> xt = nice_ticks(x_lo, x_hi, 6, whole_x);
  const std::vector<double> yt = nice_ticks(y_lo, y_hi, 5, false);
  const Scale x{xt.front(), xt.back(), kLeft, kWidth - kRight};
  const Scale y{yt.front(), yt.back(), frame.top + kPlotHeight, frame.top};
  std::string out = frame.head + y_axis(yt, y, chart.y_label, frame.top);
  for (const double t : xt) out += tick_below(x(t), frame.top, format_number(t));
  out += x_label(chart.x_label, frame.top);
  for (const Series& s : chart.references) out += polyline(s, x, y, "#888888", /*dashed=*/true);
  for (size_t i = 0; i < chart.series.size(); ++i) out += polyline(chart.series[i], x, y, color(i), false);
  for (size_t i = 0; i < chart.series.size(); ++i) out += markers(chart.series[i], x, y, color(i));
  return out + "</svg>\n</figure>\n";
}

std::string render_chart(const StackedBars& chart) {
  double top_total = 0;
  for (const auto& bar : chart.values) {
    double total = 0;
    for (const double v : bar) total += v;
    top_total = std::max(top_total, total);
  }
  const std::vector<std::string> kinds(chart.segments.size(), "block");
  std::vector<std::string> paints;
  for (size_t s = 0; s < chart.segments.size(); ++s) paints.push_back(color(s));
  Frame frame = open_frame(chart.id, chart.title, data_point_count(chart), chart.segments, paints, kinds);
  const std::vector<double> yt = nice_ticks(0, top_total > 0 ? top_total * 1.08 : 1, 5, false);
  const Scale y{yt.front(), yt.back(), frame.top + kPlotHeight, frame.top};
  std::string out = frame.head + y_axis(yt, y, chart.y_label, frame.top);
  const double slot = (kWidth - kLeft - kRight) / std::max<size_t>(chart.bars.size(), 1);
  const double width = std::min(slot * 0.6, 90.0);
  for (size_t b = 0; b < chart.bars.size(); ++b) {
    const double center = kLeft + slot * (static_cast<double>(b) + 0.5);
    double base = 0;
    for (size_t s = 0; s < chart.segments.size(); ++s) {
      const double v = chart.values[b][s];
      out += "<rect class=\"pt\" x=\"" + num(center - width / 2) + "\" y=\"" + num(y(base + v)) +
             "\" width=\"" + num(width) + "\" height=\"" + num(y(base) - y(base + v)) + "\" fill=\"" +
             paints[s] + "\" data-series=\"" + html_escape(chart.segments[s]) + "\" data-x=\"" +
             html_escape(chart.bars[b]) + "\" data-y=\"" + exact(v) + "\"><title>" +
             html_escape(chart.bars[b] + ", " + chart.segments[s]) + ": " + format_number(v) +
             "</title></rect>\n";
      base += v;
    }
    if (b < chart.bar_notes.size()) {
      out += "<text class=\"tick\" x=\"" + num(center) + "\" y=\"" + num(y(base) - 5) +
             "\" text-anchor=\"middle\">" + html_escape(chart.bar_notes[b]) + "</text>\n";
    }
    out += tick_below(center, frame.top, chart.bars[b]);
  }
  return out + "</svg>\n</figure>\n";
}

}  // namespace lockstep::cli
