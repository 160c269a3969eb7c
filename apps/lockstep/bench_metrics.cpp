#include "bench_metrics.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace lockstep::cli {

std::vector<nlohmann::json> read_jsonl(const std::string& path, const std::string& line_prefix) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read '" + path + "': " + std::strerror(errno));
  std::vector<nlohmann::json> objects;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.compare(0, line_prefix.size(), line_prefix) != 0) continue;
    const std::string text = line.substr(line_prefix.size());
    if (text.empty() || text[0] != '{') continue;
    try {
      objects.push_back(nlohmann::json::parse(text));
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(number) + ": not a JSON object (" + e.what() +
                               ")");
    }
  }
  return objects;
}

std::vector<double> numeric_field(const std::vector<nlohmann::json>& objects, const std::string& key,
                                  const std::string& source) {
  std::vector<double> values;
  for (size_t i = 0; i < objects.size(); ++i) {
    const auto found = objects[i].find(key);
    if (found == objects[i].end() || !found->is_number()) {
      throw std::runtime_error(source + ": record " + std::to_string(i + 1) + " has no numeric \"" + key +
                               "\": " + objects[i].dump());
    }
    values.push_back(found->get<double>());
  }
  return values;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

}  // namespace lockstep::cli
