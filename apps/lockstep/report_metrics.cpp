// A run's logged scalars from metrics.csv or metrics.jsonl (report_metrics.h).
#include "report_metrics.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace lockstep::cli {
namespace {

std::optional<double> finite_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace

int MetricLog::column(const std::string& key) const {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return static_cast<int>(i);
  }
  return -1;
}

std::vector<Point> MetricLog::points(const std::string& x_key, const std::string& y_key) const {
  const int x = x_key.empty() ? -1 : column(x_key);
  const int y = column(y_key);
  std::vector<Point> out;
  if (y < 0 || (!x_key.empty() && x < 0)) return out;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (!rows[r][y]) continue;
    if (x < 0) {
      out.push_back({static_cast<double>(r), *rows[r][y]});
    } else if (rows[r][x]) {
      out.push_back({*rows[r][x], *rows[r][y]});
    }
  }
  return out;
}

int MetricLog::last_row_with(const std::string& key) const {
  const int c = column(key);
  if (c < 0) return -1;
  for (int r = static_cast<int>(rows.size()) - 1; r >= 0; --r) {
    if (rows[r][c]) return r;
  }
  return -1;
}

MetricLog metrics_from_csv(const CsvTable& table) {
  MetricLog log;
  log.keys = table.header;
  for (const auto& row : table.rows) {
    std::vector<std::optional<double>> cells;
    for (const std::string& cell : row) cells.push_back(finite_number(cell));
    log.rows.push_back(std::move(cells));
  }
  return log;
}

MetricLog parse_metrics_jsonl(const std::string& text, const std::string& source) {
  MetricLog log;
  std::map<std::string, size_t> column;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::ordered_json object;
    try {
      object = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
      throw std::runtime_error(source + ":" + std::to_string(number) + ": not JSON (" + e.what() + ")");
    }
    if (!object.is_object()) {
      throw std::runtime_error(source + ":" + std::to_string(number) +
                               ": expected a JSON object {\"step\": ...}");
    }
    std::vector<std::optional<double>> row(log.keys.size());
    for (const auto& [key, value] : object.items()) {
      if (column.count(key) == 0) {
        column[key] = log.keys.size();
        log.keys.push_back(key);
        row.emplace_back();
      }
      if (value.is_number() && std::isfinite(value.get<double>())) row[column[key]] = value.get<double>();
    }
    log.rows.push_back(std::move(row));
  }
  for (auto& row : log.rows) row.resize(log.keys.size());
  return log;
}

}  // namespace lockstep::cli
