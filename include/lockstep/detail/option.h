#pragma once

#include <utility>

/// A chained setter and a getter for an option stored in the member `name_` (the TORCH_ARG habit).
/// The getter returns the member as stored: `T` for plain options, `std::optional<T>` where the
/// options class keeps "not set" apart from a value (EnvOptions).
///
/// Example (in a class `FooOptions` with a member `int bar_ = 3;`):
///   LOCKSTEP_OPTION(FooOptions, int, bar)   // FooOptions().bar(4).bar() == 4
#define LOCKSTEP_OPTION(Self, T, name) \
  Self& name(T value) {                \
    name##_ = std::move(value);        \
    return *this;                      \
  }                                    \
  const auto& name() const {           \
    return name##_;                    \
  }
