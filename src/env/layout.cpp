#include "layout.h"

#include "parse.h"

namespace lockstep::env::detail {
namespace {

// For values that did not pass through parse_int (EnvOptions).
void check_range(const Field<int>& field, int lo, int hi = kIntMax) {
  if (field.has() && (field.get() < lo || field.get() > hi)) {
    throw EnvError(field.describe() + " is out of range " + range_text(lo, hi));
  }
}

void check_not_empty(const Field<std::string>& field, const std::string& what) {
  if (field.has() && field.get().empty()) {
    throw EnvError(field.describe() + " is empty: set it to " + what);
  }
}

// "<index> is out of range for <size>: <index name> must be in [0, size - 1]".
void check_index(const Field<int>& index, const Field<int>& size) {
  if (index.get() >= size.get()) {
    throw EnvError(index.describe() + " is out of range for " + size.describe() + ": " + index.name +
                   " must be in " + range_text(0, size.get() - 1));
  }
}

}  // namespace

bool read_int(const EnvLookup& lookup, const std::string& name, Field<int>& field, int lo, int hi) {
  const auto value = lookup(name);
  if (!value) return false;
  field.set(parse_int(name, *value, lo, hi), name);
  return true;
}

bool read_string(const EnvLookup& lookup, const std::string& name, Field<std::string>& field) {
  const auto value = lookup(name);
  if (!value) return false;
  field.set(*value, name);
  return true;
}

std::string require(const EnvLookup& lookup, const std::string& name, const std::string& selector,
                    const std::string& launcher) {
  if (auto value = lookup(name)) return *value;
  throw EnvError(selector + " is set (" + describe(selector, lookup(selector).value_or("")) + ") but " +
                 name + " is not: " + launcher + " sets both; set " + name);
}

void read_master_override(const EnvLookup& lookup, Layout& layout) {
  read_string(lookup, "MASTER_ADDR", layout.master_addr);
  read_int(lookup, "MASTER_PORT", layout.master_port, 1, 65535);
}

Environment resolve(Layout l) {
  // Values from EnvOptions have not been range-checked yet; variables have, harmlessly again.
  check_range(l.rank, 0);
  check_range(l.local_rank, 0);
  check_range(l.world_size, 1);
  check_range(l.local_world_size, 1);
  check_range(l.node_rank, 0);
  check_range(l.num_nodes, 1);
  check_range(l.master_port, 1, 65535);
  check_range(l.restart_count, 0);
  check_not_empty(l.master_addr, "the host name or IP address of rank 0");
  check_not_empty(l.run_id, "a token shared by every rank of the job");

  l.world_size.fill(1, "world_size", "default: a single process");
  l.rank.fill(0, "rank", "default");
  check_index(l.rank, l.world_size);
  const int world = l.world_size.get();

  // Ranks per node: given, or every node runs the same number of ranks.
  if (!l.local_world_size.has()) {
    if (!l.num_nodes.has()) {
      l.local_world_size.set(world, "local_world_size", "default: all ranks on one node");
    } else if (world % l.num_nodes.get() == 0) {
      l.local_world_size.set(world / l.num_nodes.get(), "local_world_size",
                             "from " + l.world_size.brief() + " / " + l.num_nodes.brief());
    } else {
      throw EnvError("cannot derive the number of ranks on this node: " + l.world_size.describe() +
                     " is not a multiple of " + l.num_nodes.describe() +
                     "; set LOCAL_WORLD_SIZE (or EnvOptions::local_world_size)");
    }
  }
  if (l.local_world_size.get() > world) {
    throw EnvError(l.local_world_size.describe() + " is larger than " + l.world_size.describe() + ": " +
                   l.local_world_size.name + " must be in " + range_text(1, world));
  }
  const int local_world = l.local_world_size.get();

  l.local_rank.fill(l.rank.get() % local_world, "local_rank",
                    "from " + l.rank.brief() + " % " + l.local_world_size.brief());
  check_index(l.local_rank, l.local_world_size);

  if (!l.num_nodes.has()) {
    if (world % local_world != 0) {
      throw EnvError("cannot derive the number of nodes: " + l.world_size.describe() +
                     " is not a multiple of " + l.local_world_size.describe() +
                     ", so nodes run different numbers of ranks; set LOCKSTEP_NNODES (or "
                     "EnvOptions::num_nodes) to the number of nodes");
    }
    l.num_nodes.set(world / local_world, "num_nodes",
                    "from " + l.world_size.brief() + " / " + l.local_world_size.brief());
  }
  if (l.num_nodes.get() > world) {
    throw EnvError(l.num_nodes.describe() + " is larger than " + l.world_size.describe() + ": " +
                   l.num_nodes.name + " must be in " + range_text(1, world) +
                   " (every node runs at least one rank)");
  }
  // This node's ranks plus at least one on every other node must fit in the world.
  if (static_cast<long long>(local_world) + l.num_nodes.get() - 1 > world) {
    throw EnvError(l.local_world_size.describe() +
                   " on this node leaves fewer than one rank for each of the " +
                   std::to_string(l.num_nodes.get() - 1) + " other node(s) of " + l.num_nodes.describe() +
                   " in " + l.world_size.describe() + ": every node runs at least one rank");
  }

  l.node_rank.fill(l.rank.get() / local_world, "node_rank",
                   "from " + l.rank.brief() + " / " + l.local_world_size.brief());
  check_index(l.node_rank, l.num_nodes);

  if (!l.master_addr.has()) {
    if (l.num_nodes.get() > 1) {
      throw EnvError("the job spans " + l.num_nodes.describe() +
                     " but no master address is set, so ranks on other nodes cannot find rank 0; set "
                     "MASTER_ADDR (or EnvOptions::master_addr) to rank 0's host");
    }
    l.master_addr.set("127.0.0.1", "master_addr", "default: one node");
  }
  l.master_port.fill(29500, "master_port", "default");
  l.restart_count.fill(0, "restart_count", "default");
  l.run_id.fill("none", "run_id", "default");

  Environment env;
  env.rank = l.rank.get();
  env.local_rank = l.local_rank.get();
  env.world_size = world;
  env.local_world_size = local_world;
  env.node_rank = l.node_rank.get();
  env.num_nodes = l.num_nodes.get();
  env.master_addr = l.master_addr.get();
  env.master_port = l.master_port.get();
  env.restart_count = l.restart_count.get();
  env.run_id = l.run_id.get();
  env.source = l.source;
  return env;
}

}  // namespace lockstep::env::detail
