// `lockstep report`'s page (report_page.h): each section is built by one function from the run's data.
#include "report_page.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <regex>
#include <set>

#include "lockstep/detail/atomic_file.h"
#include "lockstep/detail/join.h"
#include "report_html.h"

namespace lockstep::cli {
namespace {

constexpr const char* kStyle = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1240px;
       padding: 0 16px; color: #222; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 32px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p.sub { color: #555; margin: 0 0 12px; font-size: 14px; }
.summary { display: flex; flex-wrap: wrap; gap: 12px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 14px; min-width: 120px; }
.card .label { font-size: 12px; color: #666; } .card .value { font-size: 20px; font-weight: 600; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 16px; }
figure.chart { margin: 0; border: 1px solid #e4e4e4; border-radius: 6px; padding: 4px; }
figure.chart svg { width: 100%; height: auto; display: block; }
svg text { font-size: 12px; fill: #333; }
svg text.title { font-size: 15px; font-weight: 600; text-anchor: middle; }
svg text.axis-label { font-size: 13px; text-anchor: middle; fill: #444; }
svg text.tick { font-size: 11px; fill: #555; }
svg line.grid { stroke: #ececec; } svg line.axis { stroke: #888; }
table { border-collapse: collapse; margin: 8px 0; font-size: 14px; }
th, td { border: 1px solid #ddd; padding: 4px 10px; text-align: left; } th { background: #f5f5f5; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { padding: 8px 12px; border-radius: 6px; background: #eef5ee; margin: 8px 0; }
.note.warn { background: #fdecea; border: 1px solid #e15759; }
footer { margin-top: 32px; color: #777; font-size: 12px; }
)";

// The column of `key` as an x key: the key itself, or "" (the row's index) when the log lacks it.
std::string x_key(const MetricLog& log, const std::string& key) {
  return log.column(key) >= 0 ? key : "";
}

std::string x_label(const MetricLog& log, const std::string& key) {
  return log.column(key) >= 0 ? key : "log call (no " + key + " column)";
}

bool known_key(const std::string& key) {
  static const std::set<std::string> known{
      "epoch",    "step",    "train_loss_step", "lr",         "train_loss_epoch",
      "val_loss", "val_acc", "time/epoch_s",    "time/val_s", "time/samples_per_s"};
  return known.count(key) != 0 || key.rfind("memory/", 0) == 0 || key.rfind("breakdown/", 0) == 0;
}

// The charts of a section in a grid; "" when all are empty.
std::string chart_grid(const std::vector<LineChart>& charts, const std::string& extra = "") {
  std::string out;
  for (const LineChart& chart : charts) {
    if (!empty(chart)) out += render_chart(chart);
  }
  if (out.empty() && extra.empty()) return "";
  return "<div class=\"charts\">\n" + out + extra + "</div>\n";
}

std::string section(const std::string& id, const std::string& title, const std::string& body) {
  if (body.empty()) return "";
  return "<section id=\"" + id + "\">\n<h2>" + html_escape(title) + "</h2>\n" + body + "</section>\n";
}

std::string card(const std::string& label, const std::string& value) {
  return "<div class=\"card\"><div class=\"label\">" + html_escape(label) + "</div><div class=\"value\">" +
         html_escape(value) + "</div></div>\n";
}

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string summary(const MetricLog& log) {
  std::string out;
  const auto last = [&log](const std::string& key) {
    const int row = log.last_row_with(key);
    return row < 0 ? std::optional<double>() : log.rows[row][log.column(key)];
  };
  if (const auto epoch = last("epoch")) out += card("epochs", format_number(*epoch + 1));
  if (const auto step = last("step")) out += card("steps", format_number(*step));
  for (const char* key : {"train_loss_epoch", "val_loss", "val_acc"}) {
    if (const auto value = last(key)) out += card(std::string("last ") + key, format_number(*value));
  }
  std::vector<double> rates;
  for (const Point& p : log.points("", "time/samples_per_s")) rates.push_back(p.y);
  if (!rates.empty()) out += card("median samples/s", format_number(median_of(rates)));
  return out.empty() ? "" : "<div class=\"summary\">\n" + out + "</div>\n";
}

std::string training(const MetricLog& log) {
  const std::string step = x_key(log, "step");
  const std::string epoch = x_key(log, "epoch");
  LineChart loss{"chart-loss", "Loss", x_label(log, "step"), "loss", {}, {}, false};
  for (const char* key : {"train_loss_step", "train_loss_epoch", "val_loss"}) {
    if (log.column(key) >= 0) loss.series.push_back({key, log.points(step, key)});
  }
  LineChart acc{"chart-val-acc",
                "Validation accuracy",
                x_label(log, "epoch"),
                "val_acc (fraction correct)",
                {{"val_acc", log.points(epoch, "val_acc")}},
                {},
                false};
  LineChart lr{"chart-lr", "Learning rate", x_label(log, "step"), "lr", {{"lr", log.points(step, "lr")}}, {},
               true};
  return chart_grid({loss, acc, lr});
}

std::string performance(const MetricLog& log) {
  const std::string epoch = x_key(log, "epoch");
  const std::string x = x_label(log, "epoch");
  LineChart rate{"chart-throughput",
                 "Training throughput per epoch",
                 x,
                 "samples/s",
                 {{"time/samples_per_s", log.points(epoch, "time/samples_per_s")}},
                 {},
                 true};
  LineChart time{"chart-epoch-time", "Time per epoch", x, "seconds", {}, {}, true};
  for (const char* key : {"time/epoch_s", "time/val_s"}) {
    if (log.column(key) >= 0) time.series.push_back({key, log.points(epoch, key)});
  }
  LineChart memory{"chart-memory", "Memory per epoch", x, "MB", {}, {}, true};
  for (const std::string& key : log.keys) {
    if (key.rfind("memory/", 0) == 0) memory.series.push_back({key, log.points(epoch, key)});
  }
  return chart_grid({rate, time, memory});
}

// breakdown/rank_R/P_ms of one row: phases in the contract's order, then any other phase; step_ms apart.
struct Breakdown {
  std::vector<int> ranks;
  std::vector<std::string> phases;
  std::map<std::pair<int, std::string>, double> ms;  // (rank, phase) -> ms; phase "step" too
};

Breakdown breakdown_of(const MetricLog& log, int row) {
  static const std::regex pattern("breakdown/rank_([0-9]+)/(.+)_ms");
  static const std::vector<std::string> order{"data", "forward", "backward", "allreduce", "optimizer"};
  Breakdown b;
  std::set<int> ranks;
  std::vector<std::string> others;
  for (size_t c = 0; c < log.keys.size(); ++c) {
    std::smatch match;
    if (!std::regex_match(log.keys[c], match, pattern) || !log.rows[row][c]) continue;
    const int rank = std::stoi(match[1]);
    const std::string phase = match[2];
    ranks.insert(rank);
    b.ms[{rank, phase}] = *log.rows[row][c];
    const bool listed = std::find(order.begin(), order.end(), phase) != order.end() ||
                        std::find(others.begin(), others.end(), phase) != others.end();
    if (phase != "step" && !listed) others.push_back(phase);
  }
  b.ranks.assign(ranks.begin(), ranks.end());
  for (const std::string& phase : order) {
    for (const int r : b.ranks) {
      if (b.ms.count({r, phase}) != 0) {
        b.phases.push_back(phase);
        break;
      }
    }
  }
  b.phases.insert(b.phases.end(), others.begin(), others.end());
  return b;
}

double step_ms(const Breakdown& b, int rank) {
  if (const auto it = b.ms.find({rank, "step"}); it != b.ms.end()) return it->second;
  double total = 0;
  for (const std::string& phase : b.phases) {
    if (const auto it = b.ms.find({rank, phase}); it != b.ms.end()) total += it->second;
  }
  return total;
}

// A rank's step less its wait for the all-reduce: in synchronous training every rank's step lasts as long
// as the slowest one's (the others wait for it in the all-reduce), so ranks are compared by this.
double busy_ms(const Breakdown& b, int rank) {
  const auto it = b.ms.find({rank, "allreduce"});
  return step_ms(b, rank) - (it == b.ms.end() ? 0.0 : it->second);
}

// The note on the slowest rank: the logged breakdown/slowest_* when present, else computed as the Trainer
// does (lockstep/train/step_breakdown.h): the largest busy time against the other ranks' median.
std::string straggler_note(const MetricLog& log, int row, const Breakdown& b) {
  const auto logged = [&](const std::string& key) {
    const int c = log.column(key);
    return c < 0 ? std::optional<double>() : log.rows[row][c];
  };
  std::optional<double> slowest = logged("breakdown/slowest_rank");
  std::optional<double> excess = logged("breakdown/slowest_excess_pct");
  if (!slowest || !excess) {
    int worst = b.ranks.front();
    for (const int r : b.ranks) {
      if (busy_ms(b, r) > busy_ms(b, worst)) worst = r;
    }
    std::vector<double> others;
    for (const int r : b.ranks) {
      if (r != worst) others.push_back(busy_ms(b, r));
    }
    const double mid = median_of(others);
    slowest = worst;
    excess = mid > 0 ? 100.0 * (busy_ms(b, worst) - mid) / mid : 0;
  }
  const std::string who = "rank " + format_number(*slowest);
  const std::string pct = format_number(std::round(*excess * 10) / 10) + "%";
  if (*excess > 20) {
    return "<p class=\"note warn\"><b>Straggler: " + who + "</b> is busy " + pct +
           " longer per step than the other ranks' median (above 20%; busy: the step less the all-reduce "
           "wait, "
           "which the other ranks spend waiting for it). Look at its data (loading, shard size) and at what "
           "else runs on its cores or GPU.</p>\n";
  }
  return "<p class=\"note\">Ranks are balanced: the slowest, " + who + ", is busy " + pct +
         " longer per step than the other ranks' median (a straggler is flagged above 20%).</p>\n";
}

std::string breakdown(const MetricLog& log) {
  int row = -1;
  for (int r = static_cast<int>(log.rows.size()) - 1; r >= 0 && row < 0; --r) {
    for (size_t c = 0; c < log.keys.size(); ++c) {
      if (log.keys[c].rfind("breakdown/rank_", 0) == 0 && log.rows[r][c]) row = r;
    }
  }
  if (row < 0) return "";
  const Breakdown b = breakdown_of(log, row);
  const int epoch_column = log.column("epoch");
  const std::string epoch = epoch_column >= 0 && log.rows[row][epoch_column]
                                ? "epoch " + format_number(*log.rows[row][epoch_column])
                                : "the last epoch logged";
  StackedBars bars{
      "chart-breakdown", "Step time per rank, " + epoch, "ms per step (mean)", {}, b.phases, {}, {}};
  for (const int r : b.ranks) {
    bars.bars.push_back("rank " + std::to_string(r));
    std::vector<double> values;
    for (const std::string& phase : b.phases) {
      const auto it = b.ms.find({r, phase});
      values.push_back(it == b.ms.end() ? 0 : std::max(0.0, it->second));
    }
    bars.values.push_back(values);
    bars.bar_notes.push_back(format_number(step_ms(b, r)) + " ms");
  }
  LineChart steps{"chart-step-ms",
                  "Busy time per rank over epochs (step less all-reduce wait)",
                  x_label(log, "epoch"),
                  "ms per step (mean)",
                  {},
                  {},
                  true};
  for (const int r : b.ranks) {
    const std::string prefix = "breakdown/rank_" + std::to_string(r) + "/";
    std::vector<Point> busy = log.points(x_key(log, "epoch"), prefix + "step_ms");
    const std::vector<Point> waits = log.points(x_key(log, "epoch"), prefix + "allreduce_ms");
    if (waits.size() == busy.size()) {
      for (size_t i = 0; i < busy.size(); ++i) busy[i].y -= waits[i].y;
    }
    steps.series.push_back({"rank " + std::to_string(r), busy});
  }
  return straggler_note(log, row, b) + chart_grid({steps}, render_chart(bars));
}

std::string other_metrics(const MetricLog& log) {
  std::vector<LineChart> charts;
  std::vector<std::string> unplotted;
  for (const std::string& key : log.keys) {
    if (known_key(key)) continue;
    LineChart chart{"chart-metric-" + std::to_string(charts.size()),
                    key,
                    x_label(log, "step"),
                    key,
                    {{key, log.points(x_key(log, "step"), key)}},
                    {},
                    false};
    if (empty(chart)) {
      unplotted.push_back(key);
    } else {
      charts.push_back(chart);
    }
  }
  std::string out = chart_grid(charts);
  if (!unplotted.empty()) {
    out += "<p class=\"note\">Keys without numeric values (not drawn): " +
           html_escape(lockstep::detail::join(unplotted, ", ")) + "</p>\n";
  }
  return out;
}

int csv_column(const CsvTable& table, const std::string& name) {
  for (size_t i = 0; i < table.header.size(); ++i) {
    if (table.header[i] == name) return static_cast<int>(i);
  }
  return -1;
}

// (column x, column y) of every row where both read as numbers.
std::vector<Point> csv_points(const CsvTable& table, int x, int y) {
  std::vector<Point> out;
  for (const auto& row : table.rows) {
    char* end_x = nullptr;
    char* end_y = nullptr;
    const double vx = std::strtod(row[x].c_str(), &end_x);
    const double vy = std::strtod(row[y].c_str(), &end_y);
    if (!row[x].empty() && !row[y].empty() && *end_x == '\0' && *end_y == '\0' && std::isfinite(vx) &&
        std::isfinite(vy))
      out.push_back({vx, vy});
  }
  return out;
}

std::string scaling(const CsvTable& table) {
  std::string out = html_table(table.header, table.rows);
  const int ranks = csv_column(table, "ranks");
  const int efficiency = csv_column(table, "efficiency_pct");
  const int speedup = csv_column(table, "speedup");
  if (ranks < 0) return out;
  std::vector<LineChart> charts;
  if (efficiency >= 0) {
    LineChart chart{"chart-scaling-efficiency",
                    "Scaling efficiency",
                    "ranks",
                    "efficiency (%)",
                    {{"efficiency_pct", csv_points(table, ranks, efficiency)}},
                    {},
                    true};
    std::vector<Point> ideal;
    for (const Point& p : chart.series[0].points) ideal.push_back({p.x, 100});
    chart.references.push_back({"ideal (100%)", ideal});
    charts.push_back(chart);
  }
  if (speedup >= 0) {
    LineChart chart{"chart-scaling-speedup",
                    "Speedup over the first rank count",
                    "ranks",
                    "speedup (x)",
                    {{"speedup", csv_points(table, ranks, speedup)}},
                    {},
                    true};
    std::vector<Point> ideal;
    const auto& points = chart.series[0].points;
    for (const Point& p : points) {
      if (points.front().x > 0) ideal.push_back({p.x, p.x / points.front().x});
    }
    chart.references.push_back({"ideal (linear)", ideal});
    charts.push_back(chart);
  }
  return out + chart_grid(charts);
}

std::string peer(const CsvTable& table) {
  std::string out = html_table(table.header, table.rows);
  if (table.header.empty()) return out;
  LineChart chart{"chart-peer", "Epoch time: Python DDP peer vs lockstep", table.header[0], "seconds", {}, {},
                  true};
  for (size_t c = 1; c < table.header.size(); ++c) {
    const std::string& name = table.header[c];
    if (name.size() >= 7 && name.compare(name.size() - 7, 7, "epoch_s") == 0) {
      chart.series.push_back({name, csv_points(table, 0, static_cast<int>(c))});
    }
  }
  return out + chart_grid({chart});
}

std::string configuration(const Hparams& hparams) {
  if (hparams.empty()) return "";
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, value] : hparams) rows.push_back({key, value});
  return html_table({"key", "value"}, rows);
}

std::string header(const RunData& run) {
  std::string sources = run.metrics_source.empty() ? "no metrics file" : run.metrics_source;
  if (!run.metrics_source.empty()) {
    sources += " (" + std::to_string(run.metrics.rows.size()) + " rows, " +
               std::to_string(run.metrics.keys.size()) + " keys)";
  }
  return "<header>\n<h1>lockstep report: " + html_escape(run.name) +
         "</h1>\n<p class=\"sub\">metrics: " + html_escape(sources) + "</p>\n" + summary(run.metrics) +
         "</header>\n";
}

}  // namespace

std::string render_report(const RunData& run) {
  std::string body = header(run);
  body += section("training", "Training", training(run.metrics));
  body += section("performance", "Throughput and memory", performance(run.metrics));
  body += section("breakdown", "Per-rank step breakdown", breakdown(run.metrics));
  body += section("other", "Other metrics", other_metrics(run.metrics));
  if (run.scaling) body += section("scaling", "Scaling (lockstep bench scaling)", scaling(*run.scaling));
  if (run.peer) body += section("peer", "Python DDP peer (lockstep bench peer)", peer(*run.peer));
  body += section("config", "Configuration (hparams.yaml)", configuration(run.hparams));
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>lockstep report: " +
         html_escape(run.name) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n" + body +
         "<footer>Written by <code>lockstep report</code>. Hover over a point for its value.</footer>\n"
         "</body>\n</html>\n";
}

void write_report(const std::filesystem::path& path, const std::string& html) {
  if (std::filesystem::is_directory(path)) {
    throw ReportError("cannot write " + path.string() + ": it is a directory; name the file, e.g. -o " +
                      (path / "report.html").string());
  }
  try {
    lockstep::detail::write_file_atomically(path.string(), html);
  } catch (const std::runtime_error& e) {
    throw ReportError(std::string(e.what()) + "; choose a writable path with -o");
  }
}

}  // namespace lockstep::cli
