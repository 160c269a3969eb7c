#include "lockstep/launch/worker_output.h"

#include <string>

#include "lockstep/launch/launch_error.h"

namespace lockstep::launch {
namespace {

bool small_number(const std::string& s) {
  return !s.empty() && s.size() <= 6 && s.find_first_not_of("0123456789") == std::string::npos;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = text.find(sep, start);
    parts.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

}  // namespace

StdStreams StdStreams::parse(const std::string& text, const std::string& option) {
  const auto bad = [&] {
    return LaunchError(option + "='" + text +
                       "' is not valid (expected 0-3 for every local rank: 1 stdout, 2 stderr, 3 both; or "
                       "LOCAL_RANK:VALUE pairs such as 0:1,1:2)");
  };
  if (text.find(':') == std::string::npos) {
    if (!small_number(text) || std::stoi(text) > kBothStreams) throw bad();
    return StdStreams(std::stoi(text));
  }
  StdStreams streams;
  streams.per_rank_given_ = true;
  for (const std::string& pair : split(text, ',')) {
    const auto colon = pair.find(':');
    if (colon == std::string::npos) throw bad();
    const std::string rank = pair.substr(0, colon), value = pair.substr(colon + 1);
    if (!small_number(rank) || !small_number(value) || std::stoi(value) > kBothStreams) throw bad();
    streams.per_rank_[std::stoi(rank)] = std::stoi(value);
  }
  return streams;
}

int StdStreams::of(int local_rank) const {
  if (!per_rank_given_) return all_;
  const auto it = per_rank_.find(local_rank);
  return it == per_rank_.end() ? kNoStream : it->second;
}

bool WorkerOutput::needs_files() const {
  return redirects || tee || !duplicate_stdout_filters.empty() || !duplicate_stderr_filters.empty();
}

std::string render_line_prefix(const std::string& line_template, int rank, int local_rank,
                               const std::string& role, const std::string& hostname) {
  const std::pair<const char*, std::string> macros[] = {{"${rank}", std::to_string(rank)},
                                                        {"${local_rank}", std::to_string(local_rank)},
                                                        {"${role_name}", role},
                                                        {"${hostname}", hostname}};
  std::string out;
  for (std::size_t i = 0; i < line_template.size();) {
    bool replaced = false;
    for (const auto& [name, value] : macros) {
      if (line_template.compare(i, std::char_traits<char>::length(name), name) == 0) {
        out += value;
        i += std::char_traits<char>::length(name);
        replaced = true;
        break;
      }
    }
    if (!replaced) out += line_template[i++];
  }
  return out;
}

std::set<int> parse_local_ranks_filter(const std::string& text) {
  std::set<int> ranks;
  for (const std::string& part : split(text, ',')) {
    if (!small_number(part)) {
      throw LaunchError("local_ranks_filter='" + text +
                        "' is not valid (expected comma-separated local ranks, e.g. 0,1,2)");
    }
    ranks.insert(std::stoi(part));
  }
  return ranks;
}

std::vector<std::string> parse_filter_list(const std::string& text) {
  if (text.empty()) return {};
  std::vector<std::string> filters(1);
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      filters.back() += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      filters.back() += ',';
      ++i;
    } else {
      filters.emplace_back();
    }
  }
  return filters;
}

}  // namespace lockstep::launch
