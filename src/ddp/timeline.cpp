#include "lockstep/ddp/timeline.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "lockstep/detail/atomic_file.h"

namespace lockstep::ddp {
namespace {

constexpr const char* kTrackNames[] = {"backward", "communication"};

}  // namespace

Timeline::Timeline(std::string path, int rank) : path_(std::move(path)), rank_(rank) {}

Timeline::~Timeline() {
  if (!enabled()) return;
  try {
    flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep: rank %d: timeline not written: %s\n", rank_, e.what());
  }
}

std::string Timeline::path_from_env(int rank) {
  const char* value = std::getenv("LOCKSTEP_TIMELINE");
  if (value == nullptr || *value == '\0') return "";
  std::string path = value;
  const std::string rank_text = std::to_string(rank);
  if (path.find("%r") != std::string::npos) {
    for (size_t pos = path.find("%r"); pos != std::string::npos;
         pos = path.find("%r", pos + rank_text.size())) {
      path.replace(pos, 2, rank_text);
    }
    return path;
  }
  const std::string ext = ".json";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0) {
    return path.insert(path.size() - ext.size(), ".rank" + rank_text);
  }
  return path + ".rank" + rank_text;
}

void Timeline::begin(const std::string& name, int track) {
  add(name, 'B', track);
}
void Timeline::end(const std::string& name, int track) {
  add(name, 'E', track);
}
void Timeline::instant(const std::string& name, int track) {
  add(name, 'i', track);
}

void Timeline::add(const std::string& name, char phase, int track) {
  if (!enabled()) return;
  const auto now = std::chrono::steady_clock::now();
  const int64_t ts_us = std::chrono::duration_cast<std::chrono::microseconds>(now - origin_).count();
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(Event{name, phase, ts_us, track});
}

std::vector<Timeline::Event> Timeline::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

void Timeline::flush() {
  if (!enabled()) return;
  const std::vector<Event> events = this->events();
  nlohmann::json trace = nlohmann::json::array();
  trace.push_back({{"name", "process_name"},
                   {"ph", "M"},
                   {"pid", rank_},
                   {"tid", 0},
                   {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  for (int track = 0; track < 2; ++track) {
    trace.push_back({{"name", "thread_name"},
                     {"ph", "M"},
                     {"pid", rank_},
                     {"tid", track},
                     {"args", {{"name", kTrackNames[track]}}}});
  }
  for (const Event& e : events) {
    nlohmann::json event = {
        {"name", e.name}, {"ph", std::string(1, e.phase)}, {"ts", e.ts_us}, {"pid", rank_}, {"tid", e.track}};
    if (e.phase == 'i') event["s"] = "t";  // an instant scoped to its track
    trace.push_back(std::move(event));
  }
  const nlohmann::json doc = {{"traceEvents", std::move(trace)}, {"displayTimeUnit", "ms"}};
  // dump(): invalid UTF-8 in a name is replaced rather than thrown on (names come from user code).
  try {
    lockstep::detail::write_file_atomically(
        path_, doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("lockstep timeline: ") + e.what());
  }
}

}  // namespace lockstep::ddp
