#pragma once

#include <string>
#include <vector>

namespace lockstep::cli {

/// `text` safe inside HTML text and quoted attribute values: & < > " ' become entities.
std::string html_escape(const std::string& text);

/// An HTML <table> with `header` in <th> cells and `rows` in <td> cells, every cell escaped; cells that
/// read as numbers are right-aligned.
std::string html_table(const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows);

}  // namespace lockstep::cli
