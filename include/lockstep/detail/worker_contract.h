#pragma once

// What a worker and the launcher that started it say to each other outside the data path, in one place:
// comm writes it (the process group's heartbeats), launch reads it, train and apps exit with it.
// Header-only and torch-free, so the launcher and the CLI can use it.
//
//  - The heartbeat pipe. The launcher gives each worker the write end of a pipe at descriptor
//    kHeartbeatFd and names it in kHeartbeatFdVariable. A lockstep process group in the worker writes one
//    line per interval, "<issued> <finished> <waiting 0|1> <last collective>\n" (the numbers of the last
//    collective issued and of the last whose wait returned; whether a wait is blocked now; the last
//    collective's description), and "bye\n" when it shuts down. A line is at most kMaxHeartbeatLine bytes,
//    so one write() of it is atomic (< PIPE_BUF), and holds no other newline.
//  - The exit status kPreemptedExitStatus (75, EX_TEMPFAIL: "try again later"). A rank that stopped at a
//    step boundary after a preemption notice, with last.ckpt written, exits with it; the launcher reports a
//    preemption instead of a failure and restarts nothing; a Slurm script requeues on it.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace lockstep::detail {

inline constexpr int kHeartbeatFd = 3;
inline constexpr const char* kHeartbeatFdVariable = "LOCKSTEP_HEARTBEAT_FD";
inline constexpr std::size_t kMaxHeartbeatLine = 400;
inline constexpr int kPreemptedExitStatus = 75;

/// One heartbeat line.
struct Heartbeat {
  std::uint64_t issued = 0;
  std::uint64_t finished = 0;
  bool waiting = false;
  std::string last_op;  ///< "" when no collective was issued yet
  bool bye = false;     ///< the process group shut down; the other fields are unset
};

/// The line for `beat`, newline included: cut to kMaxHeartbeatLine, newlines in last_op made spaces.
inline std::string format_heartbeat(const Heartbeat& beat) {
  if (beat.bye) return "bye\n";
  std::string line = std::to_string(beat.issued) + " " + std::to_string(beat.finished) + " " +
                     (beat.waiting ? "1 " : "0 ") + (beat.last_op.empty() ? std::string("-") : beat.last_op);
  if (line.size() > kMaxHeartbeatLine - 1) line.resize(kMaxHeartbeatLine - 1);
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  return line + "\n";
}

/// The count `text` holds, written as std::to_string writes it: decimal digits without a sign, blank,
/// prefix or leading zero (strtoull takes all four), that fit 64 bits; std::nullopt otherwise.
inline std::optional<std::uint64_t> parse_heartbeat_count(const std::string& text) {
  if (text.empty() || (text[0] == '0' && text.size() > 1)) return std::nullopt;
  std::uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

/// A line without its newline; std::nullopt when it is not a heartbeat (a reader skips it).
inline std::optional<Heartbeat> parse_heartbeat(const std::string& line) {
  Heartbeat beat;
  if (line == "bye") {
    beat.bye = true;
    return beat;
  }
  const auto first = line.find(' ');
  const auto second = first == std::string::npos ? first : line.find(' ', first + 1);
  if (second == std::string::npos || second + 2 > line.size()) return std::nullopt;
  const char waiting = line[second + 1];
  if (waiting != '0' && waiting != '1') return std::nullopt;
  if (second + 2 < line.size() && line[second + 2] != ' ') return std::nullopt;
  const auto issued = parse_heartbeat_count(line.substr(0, first));
  const auto finished = parse_heartbeat_count(line.substr(first + 1, second - first - 1));
  if (!issued || !finished) return std::nullopt;
  beat.issued = *issued;
  beat.finished = *finished;
  beat.waiting = waiting == '1';
  const std::string op = second + 3 <= line.size() ? line.substr(second + 3) : "";
  beat.last_op = op == "-" ? "" : op;
  return beat;
}

}  // namespace lockstep::detail
