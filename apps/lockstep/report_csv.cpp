// CSV reading and writing for the run dir's metrics.csv, scaling.csv and peer.csv (report_csv.h).
#include "report_csv.h"

#include <stdexcept>

namespace lockstep::cli {
namespace {

// Reads one record starting at `pos` (which it advances past the record's line end); `line` counts the
// physical lines read, for errors.
std::vector<std::string> read_record(const std::string& text, size_t& pos, int& line,
                                     const std::string& source) {
  std::vector<std::string> fields(1);
  const int first_line = line;
  bool quoted_field = false;  // the current field was quoted and its closing quote has been read
  while (pos < text.size()) {
    const char c = text[pos];
    if (c == '"' && fields.back().empty() && !quoted_field) {
      for (++pos;; ++pos) {
        if (pos >= text.size()) {
          throw std::runtime_error(
              source + ":" + std::to_string(first_line) +
              ": a quoted field is not closed (a \" is missing before the end of the file)");
        }
        if (text[pos] == '\n') ++line;
        if (text[pos] != '"') {
          fields.back() += text[pos];
        } else if (pos + 1 < text.size() && text[pos + 1] == '"') {
          fields.back() += '"';
          ++pos;
        } else {
          break;
        }
      }
      ++pos;
      quoted_field = true;
    } else if (c == ',') {
      fields.emplace_back();
      quoted_field = false;
      ++pos;
    } else if (c == '\n' || (c == '\r' && pos + 1 < text.size() && text[pos + 1] == '\n')) {
      pos += c == '\r' ? 2 : 1;
      ++line;
      return fields;
    } else if (quoted_field) {
      throw std::runtime_error(source + ":" + std::to_string(line) + ": text after a closing quote ('" +
                               std::string(1, c) + "'); a field is either quoted as a whole or not at all");
    } else {
      fields.back() += c;
      ++pos;
    }
  }
  ++line;
  return fields;
}

bool blank(const std::vector<std::string>& record) {
  return record.size() == 1 && record[0].empty();
}

bool needs_quotes(const std::string& field) {
  return field.find_first_of(",\"\r\n") != std::string::npos ||
         (!field.empty() && (field.front() == ' ' || field.back() == ' '));
}

}  // namespace

CsvTable parse_csv(const std::string& text, const std::string& source) {
  CsvTable table;
  size_t pos = 0;
  int line = 1;
  bool have_header = false;
  while (pos < text.size()) {
    const int record_line = line;
    std::vector<std::string> record = read_record(text, pos, line, source);
    if (blank(record)) continue;
    if (!have_header) {
      table.header = std::move(record);
      have_header = true;
      continue;
    }
    if (record.size() > table.header.size()) {
      throw std::runtime_error(source + ":" + std::to_string(record_line) + ": " +
                               std::to_string(record.size()) + " fields, but the header has " +
                               std::to_string(table.header.size()));
    }
    record.resize(table.header.size());
    table.rows.push_back(std::move(record));
  }
  return table;
}

std::string format_csv(const CsvTable& table) {
  std::string out;
  const auto write_row = [&out](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) out += ',';
      if (!needs_quotes(row[i])) {
        out += row[i];
        continue;
      }
      out += '"';
      for (const char c : row[i]) out += c == '"' ? std::string("\"\"") : std::string(1, c);
      out += '"';
    }
    out += '\n';
  };
  write_row(table.header);
  for (const auto& row : table.rows) write_row(row);
  return out;
}

}  // namespace lockstep::cli
