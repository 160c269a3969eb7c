#pragma once

#include <string>
#include <vector>

namespace lockstep::cli {

/// A CSV file: its header row and its data rows, every row as wide as the header.
struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

/// Parses RFC 4180 CSV (what Lightning's CSVLogger and Python's csv module write): fields separated by
/// commas; a field in double quotes may hold commas, line breaks and "" for a quote; CRLF or LF line ends;
/// blank lines are skipped. The first row is the header. A row shorter than the header is padded with
/// empty cells (a file whose header was widened while rows were being appended). Throws
/// std::runtime_error naming `source` and the line for an unterminated quote, for text after a closing
/// quote, and for a row longer than the header.
CsvTable parse_csv(const std::string& text, const std::string& source);

/// `table` as CSV text, one line per row ending in '\n': a field is quoted (its quotes doubled) when it
/// holds a comma, a quote, a line break or leading/trailing spaces. parse_csv reads it back unchanged.
std::string format_csv(const CsvTable& table);

}  // namespace lockstep::cli
