#include "lockstep/launch/rendezvous_options.h"

#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <string>

#include "lockstep/detail/enum_names.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch {
namespace {

constexpr lockstep::detail::EnumNames<RdzvBackend, 2> kRdzvBackendNames{
    {{RdzvBackend::kStatic, "static"}, {RdzvBackend::kC10d, "c10d"}}};

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// A positive number of seconds (up to ~115 days) as milliseconds.
std::chrono::milliseconds seconds_value(const std::string& key, const std::string& value) {
  char* end = nullptr;
  const double s = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(s) || s <= 0 || s > 1e7) {
    throw LaunchError("rdzv_conf: " + key + "='" + value +
                      "' is not valid (expected a positive number of seconds)");
  }
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(s * 1000.0)));
}

bool bool_value(const std::string& key, const std::string& value) {
  const std::string v = lower(value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw LaunchError("rdzv_conf: " + key + "='" + value + "' is not valid (expected true or false)");
}

}  // namespace

RdzvBackend parse_rdzv_backend(const std::string& text) {
  if (const auto backend = lockstep::detail::find_enum(kRdzvBackendNames, text)) return *backend;
  if (text == "etcd" || text == "etcd-v2") {
    throw LaunchError("rdzv_backend='" + text +
                      "' is not available: it needs an etcd server, which lockstep does not talk to; use "
                      "'c10d' (the same elastic rounds, hosted by one of the nodes' launchers)");
  }
  throw LaunchError("rdzv_backend='" + text + "' is not valid (expected one of: " +
                    lockstep::detail::enum_names_text(kRdzvBackendNames) + ")");
}

const char* to_string(RdzvBackend backend) {
  return lockstep::detail::enum_to_string(kRdzvBackendNames, backend);
}

NodeRange parse_nnodes(const std::string& text) {
  const auto bad = [&] {
    return LaunchError("nnodes='" + text + "' is not valid (expected N or MIN:MAX with 1 <= MIN <= MAX)");
  };
  const auto colon = text.find(':');
  const std::string lo = colon == std::string::npos ? text : text.substr(0, colon);
  const std::string hi = colon == std::string::npos ? text : text.substr(colon + 1);
  if (!all_digits(lo) || !all_digits(hi)) throw bad();
  const NodeRange range(std::stoi(lo), std::stoi(hi));
  if (range.min < 1 || range.max < range.min) throw bad();
  return range;
}

RdzvConf parse_rdzv_conf(const std::string& text) {
  RdzvConf conf;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string entry =
        trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (entry.empty()) continue;
    const std::size_t eq = entry.find('=');
    if (eq == std::string::npos) {
      throw LaunchError("rdzv_conf: '" + entry + "' is not valid (expected key=value, separated by commas)");
    }
    const std::string key = trim(entry.substr(0, eq));
    const std::string value = trim(entry.substr(eq + 1));
    if (key == "join_timeout") {
      conf.join_timeout = seconds_value(key, value);
    } else if (key == "last_call_timeout") {
      // Zero is allowed here: the round starts as soon as MIN nodes are in.
      conf.last_call_timeout = value == "0" ? std::chrono::milliseconds(0) : seconds_value(key, value);
    } else if (key == "close_timeout") {
      conf.close_timeout = seconds_value(key, value);
    } else if (key == "read_timeout") {
      conf.read_timeout = seconds_value(key, value);
    } else if (key == "heartbeat_timeout") {
      conf.heartbeat_timeout = seconds_value(key, value);
    } else if (key == "keep_alive_interval") {
      conf.keep_alive_interval = seconds_value(key, value);
    } else if (key == "keep_alive_max_attempt") {
      if (!all_digits(value) || std::stoi(value) < 1) {
        throw LaunchError("rdzv_conf: keep_alive_max_attempt='" + value +
                          "' is not valid (expected an integer >= 1)");
      }
      conf.keep_alive_max_attempt = std::stoi(value);
    } else if (key == "is_host") {
      conf.is_host = bool_value(key, value);
    } else if (key == "store_type") {
      if (lower(value) != "tcp") {
        throw LaunchError(
            "rdzv_conf: store_type='" + value +
            "' is not available (lockstep's rendezvous is served over TCP only: store_type=tcp)");
      }
    } else if (key == "cas_backoff_max_seconds") {
      conf.notes.push_back(
          "cas_backoff_max_seconds changes nothing here: lockstep's rendezvous makes no whole-state "
          "compare-and-set retries that a back-off would space out");
    } else {
      throw LaunchError(
          "rdzv_conf: unknown key '" + key +
          "' (known: join_timeout, last_call_timeout, close_timeout, read_timeout, "
          "heartbeat_timeout, keep_alive_interval, keep_alive_max_attempt, is_host, store_type, "
          "cas_backoff_max_seconds)");
    }
  }
  return conf;
}

Endpoint parse_endpoint(const std::string& text) {
  Endpoint e;
  std::string port;
  if (!text.empty() && text.front() == '[') {  // [IPv6]:port
    const auto close = text.find(']');
    if (close == std::string::npos)
      throw LaunchError("rdzv_endpoint='" + text + "' is not valid (an unclosed '[')");
    e.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':')
        throw LaunchError("rdzv_endpoint='" + text + "' is not valid (expected [HOST]:PORT)");
      port = text.substr(close + 2);
      if (port.empty()) throw LaunchError("rdzv_endpoint='" + text + "' is not valid (an empty port)");
    }
  } else {
    const auto colon = text.rfind(':');
    // More than one ':' without brackets is a bare IPv6 address.
    if (colon != std::string::npos && text.find(':') == colon) {
      e.host = text.substr(0, colon);
      port = text.substr(colon + 1);
      if (port.empty()) throw LaunchError("rdzv_endpoint='" + text + "' is not valid (an empty port)");
    } else {
      e.host = text;
    }
  }
  if (e.host.empty()) throw LaunchError("rdzv_endpoint='" + text + "' is not valid (expected HOST[:PORT])");
  if (!port.empty()) {
    if (!all_digits(port) || std::stoi(port) > 65535) {
      throw LaunchError("rdzv_endpoint='" + text + "' is not valid (the port must be in 0..65535)");
    }
    e.port = std::stoi(port);
  }
  return e;
}

}  // namespace lockstep::launch
