// `lockstep report`'s pieces without a browser: the run dir's CSV, metrics.jsonl and hparams.yaml read
// (quoted fields, empty cells, keys that appear later), HTML escaping, the charts' data points, the page's
// sections, finding a run dir and writing the page atomically. Torch-free.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "lockstep/log/hparams_yaml.h"
#include "report_chart.h"
#include "report_csv.h"
#include "report_hparams.h"
#include "report_html.h"
#include "report_metrics.h"
#include "report_page.h"
#include "report_run.h"

namespace {

namespace fs = std::filesystem;
using namespace lockstep::cli;

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// A fresh directory removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir()
      : path_(fs::temp_directory_path() /
              ("test_report." + std::to_string(::getpid()) + "." + std::to_string(counter_++))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    fs::create_directories((path_ / name).parent_path());
    std::ofstream(path_ / name) << text;
  }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(ReportCsv, QuotedFieldsHoldCommasQuotesAndLineBreaks) {
  const CsvTable t = parse_csv("key,value\r\n\"a,b\",\"say \"\"hi\"\"\"\n\"two\nlines\",x\n", "t.csv");
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0], (std::vector<std::string>{"a,b", "say \"hi\""}));
  EXPECT_EQ(t.rows[1], (std::vector<std::string>{"two\nlines", "x"}));
}

TEST(ReportCsv, EmptyCellsStayAndShortRowsArePaddedToTheHeader) {
  const CsvTable t = parse_csv("epoch,step,val_loss,val_acc\n0,9,,\n0,19\n\n", "m.csv");
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0], (std::vector<std::string>{"0", "9", "", ""}));
  EXPECT_EQ(t.rows[1], (std::vector<std::string>{"0", "19", "", ""}));
}

TEST(ReportCsv, ARowWiderThanTheHeaderNamesItsLine) {
  try {
    parse_csv("a,b\n1,2\n1,2,3\n", "m.csv");
    FAIL() << "a row of 3 fields under a header of 2 was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("m.csv:3: 3 fields, but the header has 2"), std::string::npos)
        << e.what();
  }
}

TEST(ReportCsv, AnUnclosedQuoteIsRefused) {
  EXPECT_THROW(parse_csv("a,b\n\"open,2\n", "m.csv"), std::runtime_error);
  EXPECT_THROW(parse_csv("a,b\n\"x\"y,2\n", "m.csv"), std::runtime_error);
}

TEST(ReportCsv, WhatFormatWritesParsesBackUnchanged) {
  const CsvTable table{{"epoch", "peer epoch_s", "note"},
                       {{"1", "0.5", "a,\"b\"\nc"}, {"2", "", " padded "}}};
  const CsvTable back = parse_csv(format_csv(table), "t.csv");
  EXPECT_EQ(back.header, table.header);
  EXPECT_EQ(back.rows, table.rows);
}

TEST(ReportMetrics, EmptyAndTextCellsAreAbsentAndPointsNeedBothKeys) {
  const MetricLog log =
      metrics_from_csv(parse_csv("step,loss,val\n0,1.5,\n1,,0.5\n2,nan,text\n3,1.0,\n", "m.csv"));
  const std::vector<Point> loss = log.points("step", "loss");
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_DOUBLE_EQ(loss[1].x, 3);
  EXPECT_DOUBLE_EQ(loss[1].y, 1.0);
  EXPECT_EQ(log.points("step", "val").size(), 1u);
  EXPECT_EQ(log.last_row_with("val"), 1);
  EXPECT_TRUE(log.points("step", "missing").empty());
}

TEST(ReportMetrics, JsonlKeysSeenLaterWidenTheTable) {
  const MetricLog log = parse_metrics_jsonl(
      "{\"step\":9,\"epoch\":0,\"train_loss_step\":2.1}\n\n"
      "{\"step\":99,\"epoch\":0,\"val_loss\":1.2,\"val_acc\":0.7,\"note\":\"text\"}\n",
      "m.jsonl");
  EXPECT_EQ(log.keys,
            (std::vector<std::string>{"step", "epoch", "train_loss_step", "val_loss", "val_acc", "note"}));
  ASSERT_EQ(log.rows.size(), 2u);
  EXPECT_EQ(log.rows[0].size(), 6u);
  EXPECT_FALSE(log.rows[0][3].has_value());
  EXPECT_DOUBLE_EQ(*log.rows[1][4], 0.7);
  EXPECT_FALSE(log.rows[1][5].has_value());
}

TEST(ReportMetrics, JsonlThatIsNotAnObjectNamesTheLine) {
  try {
    parse_metrics_jsonl("{\"step\":1}\n[1,2]\n", "m.jsonl");
    FAIL() << "an array line was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("m.jsonl:2"), std::string::npos) << e.what();
  }
}

// A number past a double's range is nlohmann's out_of_range, not a parse_error (fuzz/regressions/
// metrics_jsonl has the fuzzer's input): the same error naming the line.
TEST(ReportMetrics, JsonlNumberOutOfRangeNamesTheLine) {
  try {
    parse_metrics_jsonl("{\"step\":1}\n{\"step\":2,\"loss\":1e999}\n", "m.jsonl");
    FAIL() << "1e999 was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("m.jsonl:2: not JSON"), std::string::npos) << e.what();
  }
}

// What the loggers write (log::write_hparams_yaml) the report reads back as written.
TEST(ReportHparams, TheLoggersFileReadsBackAsWritten) {
  const Hparams hparams{{"model", "mlp"},     {"lr", "0.001"},         {"ranks", "1,2"},
                        {"empty", ""},        {"flag", "true"},        {"colon", "a: b"},
                        {"hash", "x #y"},     {"quote", "say \"hi\""}, {"dash", "--limit 5"},
                        {"negative", "-1.5"}, {"path", "/tmp/a b"}};
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "lockstep_report_hparams";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  lockstep::log::write_hparams_yaml(dir.string(), hparams);
  std::ifstream in(dir / "hparams.yaml");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("model: mlp\n"), std::string::npos) << text;
  EXPECT_NE(text.find("negative: -1.5\n"), std::string::npos) << text;
  EXPECT_EQ(parse_hparams_yaml(text, "h.yaml"), hparams) << text;
  std::filesystem::remove_all(dir);
}

TEST(ReportHparams, NestedMapsAreFlattened) {
  const Hparams h = parse_hparams_yaml("model: cnn\noptim:\n  name: adam\n  betas: [0.9, 0.999]\n", "h.yaml");
  EXPECT_EQ(h, (Hparams{{"model", "cnn"}, {"optim.name", "adam"}, {"optim.betas", "[0.9, 0.999]"}}));
  EXPECT_THROW(parse_hparams_yaml("- a\n- b\n", "h.yaml"), std::runtime_error);
}

// Keys that are not names (fuzz/regressions/hparams_yaml has the fuzzer's inputs) fail naming the file
// and the line, not with yaml-cpp's "bad conversion".
TEST(ReportHparams, AKeyThatIsNotANameNamesTheLine) {
  for (const char* text : {"model: cnn\n[a, b]: 1\n", "model: cnn\n{a: 1}: 2\n", "model: cnn\n? \n: 3\n",
                           "optim:\n  name: adam\n  [x]: 1\n"}) {
    try {
      parse_hparams_yaml(text, "h.yaml");
      FAIL() << "accepted: " << text;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("h.yaml: line"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("a key that is not a name"), std::string::npos) << e.what();
    }
  }
}

TEST(ReportHtml, EscapesEveryMarkupCharacter) {
  EXPECT_EQ(html_escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  const std::string table = html_table({"<k>"}, {{"<script>"}});
  EXPECT_EQ(table.find("<script>"), std::string::npos);
  EXPECT_NE(table.find("&lt;script&gt;"), std::string::npos);
}

TEST(ReportChart, DataPointsEqualsTheMarkersDrawn) {
  LineChart chart{"c", "Loss <x>", "step", "loss", {{"a", {{0, 1}, {1, 0.5}, {2, 0.25}}}, {"b\"", {{1, 2}}}},
                  {},  false};
  chart.references.push_back({"ideal", {{0, 0}, {2, 2}}});
  const std::string svg = render_chart(chart);
  EXPECT_EQ(data_point_count(chart), 4);
  EXPECT_NE(svg.find("data-points=\"4\""), std::string::npos);
  EXPECT_EQ(count_of(svg, "class=\"pt\""), 4);  // the reference line adds none
  EXPECT_EQ(count_of(svg, "data-series=\"b&quot;\""), 1);
  EXPECT_NE(svg.find("Loss &lt;x&gt;"), std::string::npos);
}

TEST(ReportChart, StackedBarsDrawOneSegmentPerRankAndPhase) {
  const StackedBars bars{
      "b", "t", "ms", {"rank 0", "rank 1", "rank 2"}, {"data", "forward"}, {{1, 2}, {1, 3}, {0, 2}}, {}};
  const std::string svg = render_chart(bars);
  EXPECT_EQ(data_point_count(bars), 6);
  EXPECT_EQ(count_of(svg, "class=\"pt\""), 6);
  EXPECT_NE(svg.find("data-points=\"6\""), std::string::npos);
}

TEST(ReportChart, NiceTicksCoverTheRangeInRoundSteps) {
  EXPECT_EQ(nice_ticks(0.3, 2.4, 5, false), (std::vector<double>{0, 0.5, 1, 1.5, 2, 2.5}));
  EXPECT_EQ(nice_ticks(0, 2, 6, true), (std::vector<double>{0, 1, 2}));
  const std::vector<double> single = nice_ticks(5, 5, 5, false);
  EXPECT_LT(single.front(), 5);
  EXPECT_GT(single.back(), 5);
  EXPECT_EQ(format_number(12000), "12000");
  EXPECT_EQ(format_number(0.30000000000000004), "0.3");
}

// A run of 2 ranks whose rank 1 is `slow` times rank 0's step time, with a user's own key.
RunData run_with_breakdown(double slow) {
  RunData run;
  run.name = "run";
  run.metrics.keys = {"epoch",
                      "step",
                      "train_loss_step",
                      "my_metric",
                      "breakdown/rank_0/forward_ms",
                      "breakdown/rank_0/backward_ms",
                      "breakdown/rank_1/forward_ms",
                      "breakdown/rank_1/backward_ms"};
  run.metrics.rows = {{0, 9, 2.0, 7, {}, {}, {}, {}},
                      {0, 19, 1.5, 6, {}, {}, {}, {}},
                      {0, 19, {}, {}, 4.0, 8.0, 4.0 * slow, 8.0 * slow}};
  return run;
}

TEST(ReportPage, AKeyTheReportDoesNotKnowGetsItsOwnChart) {
  const std::string html = render_report(run_with_breakdown(1.0));
  const size_t at = html.find("id=\"chart-metric-0\" data-points=\"2\"");
  ASSERT_NE(at, std::string::npos);
  EXPECT_NE(html.find("my_metric", at), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST(ReportPage, TheSlowestRankIsFlaggedAbove20Percent) {
  const std::string slow = render_report(run_with_breakdown(1.6));
  // Busy 1.6x rank 0's: 60% over the other ranks' median (the Trainer's rule, without the logged keys).
  EXPECT_NE(slow.find("Straggler: rank 1</b> is busy 60%"), std::string::npos);
  EXPECT_NE(slow.find("id=\"chart-breakdown\" data-points=\"4\""), std::string::npos);
  const std::string balanced = render_report(run_with_breakdown(1.1));
  EXPECT_EQ(balanced.find("Straggler"), std::string::npos);
  EXPECT_NE(balanced.find("Ranks are balanced: the slowest, rank 1"), std::string::npos);
}

TEST(ReportRun, AMissingRunDirIsNamed) {
  try {
    find_run_files("/nonexistent/run");
    FAIL();
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("'/nonexistent/run' does not exist"), std::string::npos) << e.what();
  }
}

// A run file over 1 GiB (sparse here: nothing is written) is refused before it is read.
TEST(ReportRun, ARunFileOverTheLimitIsRefusedUnread) {
  TempDir dir;
  dir.write("metrics.csv", "epoch,step\n");
  std::filesystem::resize_file(dir.path() / "metrics.csv", (std::uintmax_t{1} << 30) + 1);
  try {
    (void)load_run(find_run_files(dir.path()), "run");
    FAIL() << "a 1 GiB metrics.csv was read";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("over the limit of 1 GiB"), std::string::npos) << e.what();
  }
}

TEST(ReportRun, ADirWithoutMetricsNamesWhatWasLookedFor) {
  TempDir dir;
  dir.write("notes.txt", "x");
  try {
    find_run_files(dir.path());
    FAIL();
  } catch (const ReportError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no metrics found"), std::string::npos) << what;
    EXPECT_NE(what.find("metrics.csv, metrics.jsonl, scaling.csv and peer.csv"), std::string::npos) << what;
  }
}

TEST(ReportRun, ARootDirUsesItsNewestVersionAndItsOwnScalingCsv) {
  TempDir dir;
  dir.write("lightning_logs/version_2/metrics.csv", "step,loss\n1,2\n");
  dir.write("lightning_logs/version_10/metrics.jsonl", "{\"step\":1,\"loss\":2}\n");
  dir.write("scaling.csv", "ranks,time_per_epoch_s,speedup,efficiency_pct\n1,2,1,100\n");
  const RunFiles files = find_run_files(dir.path());
  EXPECT_EQ(files.dir, dir.path() / "lightning_logs/version_10");
  EXPECT_EQ(files.metrics, dir.path() / "lightning_logs/version_10/metrics.jsonl");
  EXPECT_EQ(files.scaling, dir.path() / "scaling.csv");
  EXPECT_EQ(load_run(files, "root").metrics.rows.size(), 1u);
}

TEST(ReportRun, AnUnwritablePathFailsAndLeavesNothingBehind) {
  TempDir dir;
  EXPECT_THROW(write_report(dir.path() / "missing/report.html", "<html>"), ReportError);
  try {
    write_report(dir.path(), "<html>");
    FAIL() << "a directory was accepted as -o";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("it is a directory; name the file"), std::string::npos) << e.what();
  }
  write_report(dir.path() / "report.html", "<html>");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);  // no temp file
}

}  // namespace
