// Timeline: per-rank paths from LOCKSTEP_TIMELINE, Chrome-trace JSON written atomically, disabled
// timelines silent, I/O errors naming the path.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "lockstep/ddp/timeline.h"

namespace lockstep::ddp {
namespace {

namespace fs = std::filesystem;

// Sets or unsets LOCKSTEP_TIMELINE for one test, restoring the previous value afterwards.
class ScopedTimelineEnv {
 public:
  explicit ScopedTimelineEnv(const char* value) {
    if (const char* old = std::getenv("LOCKSTEP_TIMELINE")) old_ = old, had_ = true;
    if (value) {
      setenv("LOCKSTEP_TIMELINE", value, 1);
    } else {
      unsetenv("LOCKSTEP_TIMELINE");
    }
  }
  ~ScopedTimelineEnv() {
    if (had_) {
      setenv("LOCKSTEP_TIMELINE", old_.c_str(), 1);
    } else {
      unsetenv("LOCKSTEP_TIMELINE");
    }
  }

 private:
  std::string old_;
  bool had_ = false;
};

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "lockstep-timeline-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return nlohmann::json::parse(in);
}

struct PathCase {
  const char* env;  // nullptr: unset
  int rank;
  const char* expected;
};

std::ostream& operator<<(std::ostream& out, const PathCase& c) {
  return out << "LOCKSTEP_TIMELINE=" << (c.env ? c.env : "(unset)") << " rank " << c.rank;
}

class PathFromEnv : public ::testing::TestWithParam<PathCase> {};

TEST_P(PathFromEnv, GivesThePerRankPath) {
  const PathCase& c = GetParam();
  ScopedTimelineEnv env(c.env);
  EXPECT_EQ(Timeline::path_from_env(c.rank), c.expected)
      << "LOCKSTEP_TIMELINE=" << (c.env ? c.env : "(unset)");
}

INSTANTIATE_TEST_SUITE_P(Variants, PathFromEnv,
                         ::testing::Values(PathCase{nullptr, 0, ""}, PathCase{"", 3, ""},
                                           PathCase{"/tmp/t.json", 2, "/tmp/t.rank2.json"},
                                           PathCase{"trace.json", 0, "trace.rank0.json"},
                                           PathCase{"/tmp/trace", 5, "/tmp/trace.rank5"},
                                           PathCase{"/tmp/t.json.gz", 1, "/tmp/t.json.gz.rank1"},
                                           PathCase{".json", 4, ".json.rank4"},
                                           PathCase{"/tmp/r%r/t.json", 7, "/tmp/r7/t.json"},
                                           PathCase{"/tmp/%r-%r.trace", 12, "/tmp/12-12.trace"}));

TEST(Timeline, WritesChromeTraceWithEventsInOrder) {
  TempDir dir;
  const fs::path path = dir / "trace.json";
  {
    Timeline timeline(path.string(), /*rank=*/3);
    ASSERT_TRUE(timeline.enabled());
    timeline.begin("backward", 0);
    timeline.instant("bucket 0 ready", 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    timeline.begin("allreduce bucket \"0\"", 1);  // a quote in the name must be escaped
    timeline.end("allreduce bucket \"0\"", 1);
    timeline.end("backward", 0);
    ASSERT_EQ(timeline.events().size(), 5u);
    timeline.flush();
    EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  }
  const auto doc = read_json(path);
  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");
  const auto& events = doc.at("traceEvents");
  std::vector<nlohmann::json> recorded;
  std::map<int, std::string> track_names;
  for (const auto& e : events) {
    EXPECT_EQ(e.at("pid"), 3);
    if (e.at("ph") == "M") {
      if (e.at("name") == "thread_name") track_names[e.at("tid").get<int>()] = e.at("args").at("name");
    } else {
      recorded.push_back(e);
    }
  }
  EXPECT_EQ(track_names, (std::map<int, std::string>{{0, "backward"}, {1, "communication"}}));
  const std::vector<std::tuple<std::string, std::string, int>> expected = {{"backward", "B", 0},
                                                                           {"bucket 0 ready", "i", 0},
                                                                           {"allreduce bucket \"0\"", "B", 1},
                                                                           {"allreduce bucket \"0\"", "E", 1},
                                                                           {"backward", "E", 0}};
  ASSERT_EQ(recorded.size(), expected.size());
  int64_t last_ts = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(recorded[i].at("name"), std::get<0>(expected[i])) << i;
    EXPECT_EQ(recorded[i].at("ph"), std::get<1>(expected[i])) << i;
    EXPECT_EQ(recorded[i].at("tid"), std::get<2>(expected[i])) << i;
    const int64_t ts = recorded[i].at("ts");
    EXPECT_GE(ts, last_ts) << i;
    last_ts = ts;
  }
  EXPECT_GE(last_ts, 2000) << "ts is in microseconds since construction; 2 ms passed";
}

TEST(Timeline, DestructorFlushesAndReplacesTheFile) {
  TempDir dir;
  const fs::path path = dir / "trace.json";
  { std::ofstream(path) << "stale"; }
  {
    Timeline timeline(path.string(), /*rank=*/0);
    timeline.begin("step", 0);
    timeline.end("step", 0);
  }
  const auto doc = read_json(path);
  size_t spans = 0;
  for (const auto& e : doc.at("traceEvents")) spans += e.at("ph") != "M";
  EXPECT_EQ(spans, 2u);
}

TEST(Timeline, DisabledRecordsAndWritesNothing) {
  TempDir dir;
  {
    Timeline timeline;
    EXPECT_FALSE(timeline.enabled());
    timeline.begin("backward", 0);
    timeline.instant("x", 1);
    timeline.end("backward", 0);
    EXPECT_TRUE(timeline.events().empty());
    timeline.flush();
  }
  {
    ScopedTimelineEnv env(nullptr);
    Timeline timeline(Timeline::path_from_env(0), 0);
    EXPECT_FALSE(timeline.enabled());
    timeline.begin("backward", 0);
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(Timeline, UnwritablePathThrowsNamingIt) {
  TempDir dir;
  const std::string path = (dir / "missing-dir" / "trace.json").string();
  Timeline timeline(path, 0);
  timeline.begin("backward", 0);
  try {
    timeline.flush();
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
}

TEST(Timeline, DestructorSwallowsWriteErrors) {
  TempDir dir;
  const std::string path = (dir / "missing-dir" / "trace.json").string();
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW({
    Timeline timeline(path, 1);
    timeline.instant("x", 0);
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(Timeline, ConcurrentRecordingKeepsEveryEvent) {
  TempDir dir;
  Timeline timeline((dir / "t.json").string(), 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) timeline.instant("e", t % 2);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(timeline.events().size(), 2000u);
}

}  // namespace
}  // namespace lockstep::ddp
