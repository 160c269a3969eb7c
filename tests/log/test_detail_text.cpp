// The torch-free text helpers every layer shares: lockstep/detail/join.h (lists in messages and files) and
// lockstep/detail/enum_names.h (one table of names per enum: to_string, the parser, its error).
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lockstep/detail/enum_names.h"
#include "lockstep/detail/join.h"

namespace {

using lockstep::detail::join;
using lockstep::detail::join_first;

TEST(Join, SeparatesItemsAndKeepsEmptyOnes) {
  EXPECT_EQ(join(std::vector<std::string>{}, ", "), "");
  EXPECT_EQ(join(std::vector<std::string>{"gloo"}, ", "), "gloo");
  EXPECT_EQ(join(std::vector<std::string>{"gloo", "shm", "mpi"}, ", "), "gloo, shm, mpi");
  EXPECT_EQ(join(std::vector<std::string>{"", "b", ""}, ","), ",b,");  // a csv header with empty keys
}

TEST(Join, ConvertsEachItem) {
  const std::map<std::string, double> metrics = {{"val_loss", 0.5}, {"epoch", 1}};
  EXPECT_EQ(join(metrics, ", ", [](const auto& entry) { return entry.first; }), "epoch, val_loss");
  EXPECT_EQ(join(std::vector<int>{9, 15}, ",", [](int s) { return "SIG" + std::to_string(s); }),
            "SIG9,SIG15");
}

TEST(Join, FirstListsAtMostTheLimitAndCountsTheRest) {
  const auto text = [](int r) { return std::to_string(r); };
  EXPECT_EQ(join_first(std::vector<int>{}, 2, ", ", text), "");
  EXPECT_EQ(join_first(std::vector<int>{3, 5}, 2, ", ", text), "3, 5");
  EXPECT_EQ(join_first(std::vector<int>{3, 5, 8}, 2, ", ", text), "3, 5, ... (3 in all)");
  EXPECT_EQ(join_first(std::vector<int>{3, 5, 8, 9}, 0, "; ", text), "; ... (4 in all)");
}

enum class Color { kRed, kGreen, kBlue };
constexpr lockstep::detail::EnumNames<Color, 4> kColorNames{{{Color::kRed, "red"},
                                                             {Color::kGreen, "green"},
                                                             {Color::kBlue, "blue"},
                                                             {Color::kGreen, "lime", /*alias=*/true}}};

TEST(EnumNames, NamesParsesAndListsFromOneTable) {
  static_assert(std::string_view(lockstep::detail::enum_to_string(kColorNames, Color::kBlue)) == "blue");
  EXPECT_STREQ(lockstep::detail::enum_to_string(kColorNames, Color::kGreen), "green");  // not the alias
  EXPECT_STREQ(lockstep::detail::enum_to_string(kColorNames, static_cast<Color>(7)), "?");
  EXPECT_EQ(lockstep::detail::parse_enum(kColorNames, "red", "color"), Color::kRed);
  EXPECT_EQ(lockstep::detail::parse_enum(kColorNames, "lime", "color"), Color::kGreen);
  EXPECT_FALSE(lockstep::detail::find_enum(kColorNames, "Red").has_value());  // exact spelling only
  EXPECT_EQ(lockstep::detail::enum_names_text(kColorNames, " | "), "red | green | blue");
}

TEST(EnumNames, AnUnknownNameIsNamedWithTheAcceptedOnes) {
  try {
    lockstep::detail::parse_enum(kColorNames, "teal", "--color");
    FAIL() << "teal was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--color 'teal' is not known (expected one of: red, green, blue)");
  }
  try {
    lockstep::detail::parse_enum(kColorNames, "", "color", "lime is accepted too");
    FAIL() << "an empty name was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "color '' is not known (expected one of: red, green, blue; lime is accepted too)");
  }
}

}  // namespace
