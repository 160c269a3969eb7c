#include <lockstep/env/environment.h>
#include <lockstep/env/slurm.h>

#include <cstddef>
#include <limits>

#include "parse.h"

// Slurm's compressed lists, as its hostlist code writes them.
//
// Hostlist ("gpu[01-03,07],login1", "a[0-1]b[2-3]"): split the value at commas outside brackets; each
// host expression alternates literal text and bracket groups. A host expression is expanded left to
// right: starting from {""}, literal text is appended to every partial name, and a group replaces each
// partial name p by p+n for every number n of the group, in order. So the first group varies slowest,
// which is the order Slurm itself prints. Numbers keep the width of their range's lower bound.
//
// Tasks per node ("2(x3),1"): each item is a count, optionally repeated "(xK)" times.

namespace lockstep::env {
namespace {

constexpr std::size_t kMaxEntries = std::size_t{1} << 20;
// The bytes of all expanded names: 2^20 hosts of 16 characters. Without it, 2^20 names with every
// character of a long literal appended to each took seconds (the env fuzz target's timeout).
constexpr std::size_t kMaxNameBytes = std::size_t{1} << 24;

class HostlistParser {
 public:
  HostlistParser(const std::string& value, const std::string& variable)
      : value_(value), variable_(variable) {}

  std::vector<std::string> parse() {
    if (value_.empty()) fail("it is empty");
    std::vector<std::string> hosts;
    std::size_t item_begin = 0;
    int depth = 0;
    for (std::size_t i = 0; i <= value_.size(); ++i) {
      const char c = i < value_.size() ? value_[i] : ',';
      if (c == '[') {
        if (depth == 1) fail("nested '[' at position " + std::to_string(i));
        depth = 1;
      } else if (c == ']') {
        if (depth == 0) fail("']' at position " + std::to_string(i) + " has no matching '['");
        depth = 0;
      } else if (c == ',' && depth == 0) {
        expand_item(item_begin, i, hosts);
        item_begin = i + 1;
      }
    }
    if (depth == 1) fail("'[' is never closed");
    return hosts;
  }

 private:
  [[noreturn]] void fail(const std::string& reason) const {
    throw EnvError(detail::describe(variable_, value_) + " is not a valid Slurm hostlist: " + reason +
                   "; expected host names and bracket ranges like 'gpu[01-03,07],login1'");
  }

  static bool is_host_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_';
  }

  // Counts `more` bytes of expanded names against kMaxNameBytes (all items of the list together).
  void add_name_bytes(std::size_t more) {
    if (more > kMaxNameBytes - name_bytes_) fail("its host names come to more than 16 MiB");
    name_bytes_ += more;
  }

  // Expands value_[begin, end), which has balanced, non-nested brackets, onto `hosts`.
  void expand_item(std::size_t begin, std::size_t end, std::vector<std::string>& hosts) {
    if (begin == end) fail("empty host name at position " + std::to_string(begin));
    std::vector<std::string> names{""};
    std::size_t bytes = 0;  // of `names`, counted in name_bytes_
    std::size_t i = begin;
    while (i < end) {
      if (value_[i] == '[') {
        const std::size_t close = value_.find(']', i);
        const std::vector<std::string> numbers = expand_group(i + 1, close);
        if (names.size() * numbers.size() > kMaxEntries) fail("it names more than 2^20 hosts");
        std::size_t number_bytes = 0;
        for (const auto& number : numbers) number_bytes += number.size();
        // Each name is repeated once per number, and each number appended once per name.
        add_name_bytes(bytes * (numbers.size() - 1) + names.size() * number_bytes);
        bytes = bytes * numbers.size() + names.size() * number_bytes;
        std::vector<std::string> product;
        product.reserve(names.size() * numbers.size());
        for (const auto& name : names) {
          for (const auto& number : numbers) product.push_back(name + number);
        }
        names = std::move(product);
        i = close + 1;
      } else {
        if (!is_host_char(value_[i])) {
          fail("character '" + std::string(1, value_[i]) + "' at position " + std::to_string(i) +
               " cannot be part of a host name");
        }
        add_name_bytes(names.size());
        bytes += names.size();
        for (auto& name : names) name += value_[i];
        ++i;
      }
    }
    if (hosts.size() + names.size() > kMaxEntries) fail("it names more than 2^20 hosts");
    hosts.insert(hosts.end(), names.begin(), names.end());
  }

  // The numbers of the group value_[begin, end) (between '[' and ']'), formatted.
  std::vector<std::string> expand_group(std::size_t begin, std::size_t end) const {
    const std::string group = value_.substr(begin, end - begin);
    if (group.empty()) fail("empty brackets '[]' at position " + std::to_string(begin - 1));
    std::vector<std::string> numbers;
    std::size_t part_begin = 0;
    while (part_begin <= group.size()) {
      std::size_t part_end = group.find(',', part_begin);
      if (part_end == std::string::npos) part_end = group.size();
      append_range(group.substr(part_begin, part_end - part_begin), numbers);
      part_begin = part_end + 1;
    }
    return numbers;
  }

  void append_range(const std::string& range, std::vector<std::string>& numbers) const {
    if (range.empty()) fail("empty range in brackets");
    const std::size_t dash = range.find('-');
    const std::string lo_text = range.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
    const auto lo = detail::try_parse_digits(lo_text);
    const auto hi = detail::try_parse_digits(hi_text);
    if (!lo || !hi) fail("range '" + range + "' is not a number or a range of numbers like 01-03");
    if (*lo > *hi) fail("range " + range + " is reversed (the first number must not exceed the second)");
    const auto count = static_cast<unsigned long long>(*hi - *lo) + 1;
    if (count > kMaxEntries || numbers.size() + count > kMaxEntries) {
      fail("range " + range + " names more than 2^20 hosts");
    }
    for (long long n = *lo; n <= *hi; ++n) {
      std::string text = std::to_string(n);
      if (text.size() < lo_text.size()) text.insert(0, lo_text.size() - text.size(), '0');
      numbers.push_back(std::move(text));
    }
  }

  const std::string& value_;
  const std::string& variable_;
  std::size_t name_bytes_ = 0;
};

[[noreturn]] void bad_tasks_per_node(const std::string& variable, const std::string& value,
                                     const std::string& reason) {
  throw EnvError(detail::describe(variable, value) + " is not a valid Slurm tasks-per-node list: " + reason +
                 "; expected counts like '2(x3),1' (three nodes with 2 tasks, one with 1)");
}

}  // namespace

std::vector<std::string> expand_nodelist(const std::string& value, const std::string& variable) {
  return HostlistParser(value, variable).parse();
}

std::vector<int> expand_tasks_per_node(const std::string& value, const std::string& variable) {
  if (value.empty()) bad_tasks_per_node(variable, value, "it is empty");
  std::vector<int> counts;
  std::size_t begin = 0;
  while (begin <= value.size()) {
    std::size_t end = value.find(',', begin);
    if (end == std::string::npos) end = value.size();
    const std::string item = value.substr(begin, end - begin);
    begin = end + 1;

    std::string count_text = item;
    std::string repeat_text = "1";
    if (const std::size_t open = item.find('('); open != std::string::npos) {
      if (item.size() < open + 4 || item[open + 1] != 'x' || item.back() != ')') {
        bad_tasks_per_node(variable, value, "item '" + item + "' is not N or N(xK)");
      }
      count_text = item.substr(0, open);
      repeat_text = item.substr(open + 2, item.size() - open - 3);
    }
    const auto count = detail::try_parse_digits(count_text);
    const auto repeat = detail::try_parse_digits(repeat_text);
    if (!count || !repeat) bad_tasks_per_node(variable, value, "item '" + item + "' is not N or N(xK)");
    if (*count > std::numeric_limits<int>::max()) {
      bad_tasks_per_node(variable, value, "task count " + count_text + " is too large");
    }
    if (*repeat < 1) bad_tasks_per_node(variable, value, "repeat count in '" + item + "' must be >= 1");
    if (static_cast<unsigned long long>(*repeat) > kMaxEntries - counts.size()) {
      bad_tasks_per_node(variable, value, "it describes more than 2^20 nodes");
    }
    counts.insert(counts.end(), static_cast<std::size_t>(*repeat), static_cast<int>(*count));
  }
  return counts;
}

}  // namespace lockstep::env
