#pragma once

#include <cstdint>

namespace lockstep::data {

/// A part of an epoch that ran on another world size before this one (an elastic job shrank or grew, or a
/// run resumed a mid-epoch checkpoint on other ranks): `world` ranks each trained `batches` batches of it,
/// out of `planned` (-1: all it had).
struct EpochPart {
  int world = 1;
  int64_t batches = 0;
  int64_t planned = -1;
  bool operator==(const EpochPart& o) const {
    return world == o.world && batches == o.batches && planned == o.planned;
  }
};

}  // namespace lockstep::data
