// Slurm's compressed lists: hostlists (SLURM_JOB_NODELIST) and tasks per node (SLURM_TASKS_PER_NODE).

#include <gtest/gtest.h>
#include <lockstep/env/environment.h>
#include <lockstep/env/slurm.h>

#include <string>
#include <vector>

namespace lockstep::env {
namespace {

// Runs `f`, expecting EnvError whose message contains every one of `parts`.
template <typename F>
void expect_env_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected EnvError";
  } catch (const EnvError& e) {
    const std::string message = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nmissing: " << part;
    }
  }
}

// How messages name a value: quoted unless it is a plain decimal integer.
std::string named(const std::string& variable, const std::string& value) {
  const bool digits = !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
  return digits ? variable + "=" + value : variable + "='" + value + "'";
}

struct NodelistCase {
  std::string name;
  std::string value;
  std::vector<std::string> hosts;
};

std::ostream& operator<<(std::ostream& os, const NodelistCase& c) {
  return os << c.name;
}

class ExpandNodelist : public testing::TestWithParam<NodelistCase> {};

TEST_P(ExpandNodelist, ExpandsInSlurmOrder) {
  EXPECT_EQ(expand_nodelist(GetParam().value), GetParam().hosts);
}

INSTANTIATE_TEST_SUITE_P(
    Hostlists, ExpandNodelist,
    testing::Values(
        NodelistCase{"SingleHost", "login1", {"login1"}}, NodelistCase{"PlainList", "a,b,c", {"a", "b", "c"}},
        NodelistCase{"DottedName", "host-01.example.org", {"host-01.example.org"}},
        NodelistCase{
            "RangesAndPlain", "gpu[01-03,07],login1", {"gpu01", "gpu02", "gpu03", "gpu07", "login1"}},
        NodelistCase{"PaddingKeptAcrossWidth", "n[08-10]", {"n08", "n09", "n10"}},
        NodelistCase{"NoPaddingWithoutLeadingZero", "n[8-10]", {"n8", "n9", "n10"}},
        NodelistCase{"WidePadding", "n[001-003]", {"n001", "n002", "n003"}},
        NodelistCase{"SingleNumberInBrackets", "n[5]", {"n5"}},
        NodelistCase{"ZeroLengthRange", "n[0-0]", {"n0"}},
        NodelistCase{"OrderOfRangesKept", "n[09-10,05]", {"n09", "n10", "n05"}},
        NodelistCase{"Suffix", "node[1-2]-ib", {"node1-ib", "node2-ib"}},
        NodelistCase{"TwoGroupsCartesianFirstSlowest", "a[0-1]b[2-3]", {"a0b2", "a0b3", "a1b2", "a1b3"}},
        NodelistCase{"TwoGroupsWithSuffixes",
                     "rack[1-2]-n[01-02].c",
                     {"rack1-n01.c", "rack1-n02.c", "rack2-n01.c", "rack2-n02.c"}},
        NodelistCase{"SeveralBracketedItems", "gpu[1,3-4],cpu[7]", {"gpu1", "gpu3", "gpu4", "cpu7"}},
        NodelistCase{"OnlyBrackets", "[1-2]", {"1", "2"}}, NodelistCase{"DuplicatesKept", "a,a", {"a", "a"}}),
    [](const testing::TestParamInfo<NodelistCase>& info) { return info.param.name; });

struct BadNodelistCase {
  std::string name;
  std::string value;
  std::string reason;
};

std::ostream& operator<<(std::ostream& os, const BadNodelistCase& c) {
  return os << c.name;
}

class ExpandNodelistError : public testing::TestWithParam<BadNodelistCase> {};

TEST_P(ExpandNodelistError, NamesVariableValueAndReason) {
  const auto& c = GetParam();
  expect_env_error(
      [&] { expand_nodelist(c.value, "SLURM_JOB_NODELIST"); },
      {named("SLURM_JOB_NODELIST", c.value), "not a valid Slurm hostlist", c.reason, "gpu[01-03,07],login1"});
}

INSTANTIATE_TEST_SUITE_P(
    Garbled, ExpandNodelistError,
    testing::Values(BadNodelistCase{"Empty", "", "empty"},
                    BadNodelistCase{"ReversedRange", "gpu[03-01]", "range 03-01 is reversed"},
                    BadNodelistCase{"UnclosedBracket", "gpu[01-03", "never closed"},
                    BadNodelistCase{"UnclosedBracketBeforeComma", "gpu[01,login1", "never closed"},
                    BadNodelistCase{"UnopenedBracket", "gpu01-03]", "no matching '['"},
                    BadNodelistCase{"NestedBracket", "gpu[[1]]", "nested"},
                    BadNodelistCase{"EmptyBrackets", "gpu[]", "empty brackets"},
                    BadNodelistCase{"EmptyRangeInList", "gpu[1,]", "empty range"},
                    BadNodelistCase{"LettersInRange", "gpu[a-b]", "not a number"},
                    BadNodelistCase{"DoubleDash", "gpu[1-2-3]", "not a number"},
                    BadNodelistCase{"NegativeLowerBound", "gpu[-1]", "not a number"},
                    BadNodelistCase{"EmptyItem", "a,,b", "empty host name at position 2"},
                    BadNodelistCase{"TrailingComma", "a,", "empty host name"},
                    BadNodelistCase{"Space", "gpu 01", "character ' '"},
                    BadNodelistCase{"HugeRange", "n[0-2000000]", "more than 2^20"},
                    BadNodelistCase{"HugeProduct", "a[0-1023]b[0-1024]", "more than 2^20"},
                    // 2^20 names of ~24 bytes (fuzz/regressions/env: such a list took seconds to expand).
                    BadNodelistCase{"HugeNames", "a[0-1023]b[0-1023]" + std::string(16, 'x'),
                                    "more than 16 MiB"}),
    [](const testing::TestParamInfo<BadNodelistCase>& info) { return info.param.name; });

TEST(ExpandNodelist, ErrorNamesTheGivenVariable) {
  expect_env_error([] { expand_nodelist("gpu[03-01]", "SLURM_STEP_NODELIST"); },
                   {"SLURM_STEP_NODELIST='gpu[03-01]'"});
}

struct TasksCase {
  std::string name;
  std::string value;
  std::vector<int> counts;
};

std::ostream& operator<<(std::ostream& os, const TasksCase& c) {
  return os << c.name;
}

class ExpandTasksPerNode : public testing::TestWithParam<TasksCase> {};

TEST_P(ExpandTasksPerNode, OneCountPerNode) {
  EXPECT_EQ(expand_tasks_per_node(GetParam().value), GetParam().counts);
}

INSTANTIATE_TEST_SUITE_P(Lists, ExpandTasksPerNode,
                         testing::Values(TasksCase{"Single", "4", {4}}, TasksCase{"Plain", "1,2", {1, 2}},
                                         TasksCase{"RepeatThenPlain", "2(x3),1", {2, 2, 2, 1}},
                                         TasksCase{"RepeatOnce", "1(x1)", {1}},
                                         TasksCase{"TwoRepeats", "8(x2),4(x2)", {8, 8, 4, 4}},
                                         TasksCase{"ZeroTasksOnANode", "0,2", {0, 2}}),
                         [](const testing::TestParamInfo<TasksCase>& info) { return info.param.name; });

class ExpandTasksPerNodeError : public testing::TestWithParam<BadNodelistCase> {};

TEST_P(ExpandTasksPerNodeError, NamesVariableValueAndReason) {
  const auto& c = GetParam();
  expect_env_error(
      [&] { expand_tasks_per_node(c.value, "SLURM_TASKS_PER_NODE"); },
      {named("SLURM_TASKS_PER_NODE", c.value), "not a valid Slurm tasks-per-node list", c.reason, "2(x3),1"});
}

INSTANTIATE_TEST_SUITE_P(Garbled, ExpandTasksPerNodeError,
                         testing::Values(BadNodelistCase{"Empty", "", "empty"},
                                         BadNodelistCase{"ZeroRepeat", "2(x0)", "must be >= 1"},
                                         BadNodelistCase{"MissingX", "2(3)", "not N or N(xK)"},
                                         BadNodelistCase{"UnclosedParen", "2(x3", "not N or N(xK)"},
                                         BadNodelistCase{"EmptyRepeat", "2(x)", "not N or N(xK)"},
                                         BadNodelistCase{"MissingCount", "(x2)", "not N or N(xK)"},
                                         BadNodelistCase{"Letters", "x,1", "item 'x'"},
                                         BadNodelistCase{"Negative", "-1", "item '-1'"},
                                         BadNodelistCase{"EmptyItem", "2,,1", "item ''"},
                                         BadNodelistCase{"Space", "1 ,2", "item '1 '"},
                                         BadNodelistCase{"CountTooLarge", "99999999999", "too large"},
                                         BadNodelistCase{"TooManyNodes", "1(x2000000)", "more than 2^20"}),
                         [](const testing::TestParamInfo<BadNodelistCase>& info) { return info.param.name; });

}  // namespace
}  // namespace lockstep::env
