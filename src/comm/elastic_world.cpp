#include "lockstep/comm/elastic_world.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "lockstep/comm/comm_error.h"
#include "lockstep/comm/tcp_store.h"
#include "lockstep/detail/elastic_contract.h"
#include "lockstep/detail/join.h"
#include "seconds_text.h"
#include "store_bytes.h"

namespace lockstep::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kOp = "elastic";
// A generation after the first forms among processes that are all running: it needs no start-up margin.
constexpr std::chrono::milliseconds kReformTimeout{30000};
// How long reform() waits for the launcher to announce a loss after a failed step: the launcher sees an
// exit at once and a silent rank within its heartbeat timeout.
constexpr std::chrono::milliseconds kAnnounceTimeout{60000};
constexpr std::chrono::milliseconds kAnnounceSlice{100};
// Set by refuse_joins(): why the job admits no joiners.
constexpr const char* kRefusedKey = "joins_refused";

using detail::bytes;
using detail::text;

c10::intrusive_ptr<c10d::Store> launcher_store(const ProcessGroupOptions& o) {
  const char* where = std::getenv(lockstep::detail::kElasticStoreVariable);
  const std::string endpoint = where != nullptr ? where : "";
  const auto colon = endpoint.rfind(':');
  int port = 0;
  if (colon != std::string::npos) port = std::atoi(endpoint.c_str() + colon + 1);
  if (colon == std::string::npos || colon == 0 || port < 1 || port > 65535) {
    throw std::invalid_argument(std::string(lockstep::detail::kElasticStoreVariable) + "='" + endpoint +
                                "' is not HOST:PORT: start the job with `lockstep run --recovery in-place`, "
                                "which serves the store and sets it (or pass ProcessGroupOptions::store)");
  }
  return c10::make_intrusive<TcpStore>(
      TcpStoreOptions(endpoint.substr(0, colon), port, o.run_id(), o.world_size(), o.rank())
          .connect_timeout(o.rendezvous_timeout())
          .timeout(o.rendezvous_timeout())
          .server_name("the launcher (which serves the store under --recovery in-place)")
          .secret(o.job_secret()));
}

std::string ids_text(const std::vector<int>& ids) {
  return lockstep::detail::join_first(ids, 16, ", ", [](int id) { return std::to_string(id); });
}

}  // namespace

std::string MembershipChange::describe() const {
  std::string out;
  if (!left.empty()) {
    out = "rank(s) " + ids_text(left) + " left (";
    std::vector<std::string> reasons;  // each once: a host's ranks are lost for one reason
    for (const std::string& reason : why) {
      if (std::find(reasons.begin(), reasons.end(), reason) == reasons.end()) reasons.push_back(reason);
    }
    for (std::size_t i = 0; i < reasons.size(); ++i) out += (i > 0 ? "; " : "") + reasons[i];
    out += ")";
  }
  if (!joined.empty()) out += (out.empty() ? "rank(s) " : ", rank(s) ") + ids_text(joined) + " joined";
  if (out.empty())
    out = "the members are unchanged (ranks that asked to join were lost before their admission)";
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.2f", seconds_since_seen);
  return out + "; world " + std::to_string(old_size) + " -> " + std::to_string(new_size) + " (generation " +
         std::to_string(generation) + "); training again " + seconds + " s after the " +
         (left.empty() ? "join was asked" : "loss was seen");
}

std::optional<int> ElasticWorld::joining_id() {
  const char* value = std::getenv(lockstep::detail::kElasticJoinVariable);
  if (value == nullptr || *value == '\0') return std::nullopt;
  char* end = nullptr;
  const long id = std::strtol(value, &end, 10);
  if (*end != '\0' || id < 1 || id > 1000000) {
    throw std::invalid_argument(std::string(lockstep::detail::kElasticJoinVariable) + "='" + value +
                                "' is not a rank id: the launcher that starts a joining worker sets it");
  }
  return static_cast<int>(id);
}

ElasticWorld::ElasticWorld(ProcessGroupOptions options, std::optional<int> join_as)
    : options_(std::move(options)) {
  if (options_.backend() == Backend::kAuto) options_.backend(Backend::kGloo);
  if (options_.backend() != Backend::kGloo) {
    throw std::invalid_argument(std::string("elastic in-place recovery runs on the gloo backend, not ") +
                                to_string(options_.backend()) +
                                ": a collective with a lost peer can be abandoned there (use --backend gloo "
                                "or auto)");
  }
  options_.validate();
  id_ = options_.rank();
  initial_size_ = options_.world_size();
  root_ = options_.store() ? options_.store() : launcher_store(options_);
  std::string prefix = lockstep::detail::elastic_prefix(options_.run_id());
  prefix.pop_back();  // PrefixStore adds the '/'
  elastic_ = c10::make_intrusive<c10d::PrefixStore>(prefix, root_);
  const auto deadline = Clock::now() + options_.rendezvous_timeout();
  int generation = announced_generation();
  if (join_as) {
    id_ = *join_as;
    joined_ = true;
    generation = announce_join();
  }
  while (!form(std::max(generation, announced_generation()), deadline)) {
  }
}

void ElasticWorld::refuse_joins(const std::string& why) {
  elastic_->set(kRefusedKey, bytes(why));
}

int ElasticWorld::announce_join() {
  if (elastic_->check({kRefusedKey})) {
    throw CommError(options_.rank(), kOp,
                    "rank id " + std::to_string(id_) + " cannot join: the running job admits no joiners (" +
                        text(elastic_->get(kRefusedKey)) + ")");
  }
  // The counter first (elastic_contract.h), then the record under the number it gave.
  const int n = static_cast<int>(elastic_->add(lockstep::detail::kGenerationKey, 1));
  elastic_->set(lockstep::detail::change_key(n),
                bytes(lockstep::detail::format_membership(
                    {id_, lockstep::detail::unix_ms_now(), "asked to join", /*joined=*/true})));
  return n;
}

ElasticWorld::~ElasticWorld() = default;

int ElasticWorld::announced_generation() {
  return static_cast<int>(elastic_->add(lockstep::detail::kGenerationKey, 0));
}

const lockstep::detail::MembershipRecord& ElasticWorld::record(int n) {
  while (static_cast<int>(records_.size()) < n) {
    const int next = static_cast<int>(records_.size()) + 1;
    const std::string value = text(elastic_->get(lockstep::detail::change_key(next)));
    auto parsed = lockstep::detail::parse_membership(value);
    if (!parsed) {
      throw CommError(options_.rank(), kOp,
                      "the launcher's store holds a malformed membership change " + std::to_string(next) +
                          ": '" + value + "'");
    }
    records_.push_back(*parsed);
  }
  return records_.at(static_cast<std::size_t>(n - 1));
}

std::vector<int> ElasticWorld::members_of(int generation) {
  std::vector<int> members(static_cast<std::size_t>(initial_size_));
  std::iota(members.begin(), members.end(), 0);
  for (int n = 1; n <= generation; ++n) {
    const auto& change = record(n);
    members.erase(std::remove(members.begin(), members.end(), change.id), members.end());
    if (change.joined) members.insert(std::upper_bound(members.begin(), members.end(), change.id), change.id);
  }
  return members;
}

std::string ElasticWorld::reason_lost(int id, int generation) {
  std::string reason;  // the last change that names it: a joiner lost later
  for (int n = 1; n <= generation; ++n) {
    if (record(n).id == id) reason = record(n).joined ? "" : record(n).reason;
  }
  return reason;
}

std::string ElasticWorld::changed_since(int generation) {
  const int newest = announced_generation();
  for (int n = generation + 1; n <= newest; ++n) {
    const auto& change = record(n);
    if (change.joined) continue;
    return "the job lost rank " + std::to_string(change.id) + " (" + change.reason + ")" +
           (newest > n ? " and " + std::to_string(newest - n) + " more change(s)" : "");
  }
  return "";
}

bool ElasticWorld::form(int generation, Clock::time_point deadline) {
  const std::vector<int> members = members_of(generation);
  const auto mine = std::find(members.begin(), members.end(), id_);
  if (mine == members.end()) {
    throw CommError(options_.rank(), kOp,
                    "this process (rank " + std::to_string(id_) +
                        " of the job's start) was declared lost by the launcher: " +
                        reason_lost(id_, generation) + "; the others went on without it");
  }
  const int rank = static_cast<int>(mine - members.begin());
  const int size = static_cast<int>(members.size());
  auto store = c10::make_intrusive<c10d::PrefixStore>("g" + std::to_string(generation), elastic_);

  // Check in, and wait for every member in slices: a member lost meanwhile makes a newer generation.
  if (store->add("arrived", 1) == size) store->set("ready", bytes("1"));
  for (;;) {
    try {
      store->wait({"ready"}, Work::kInterruptSlice);
      break;
    } catch (const std::exception&) {
      if (announced_generation() > generation) return false;
      if (joined_ && !group_ && elastic_->add(lockstep::detail::kFinishedKey, 0) > 0) {
        throw CommError(options_.rank(), kOp,
                        "rank id " + std::to_string(id_) +
                            " asked to join, but the job finished training before admitting it");
      }
      if (Clock::now() >= deadline) {
        throw CommError(options_.rank(), kOp,
                        "generation " + std::to_string(generation) + " did not form: members " +
                            ids_text(members) + " were expected, " +
                            std::to_string(store->add("arrived", 0)) +
                            " arrived, and the launcher announced no loss");
      }
    }
  }

  auto options = options_;
  options.rank(rank)
      .world_size(size)
      .local_world_size(0)  // one node (LaunchOptions::in_place): world_size / num_nodes
      .store(store)
      .interrupt([this, generation] { return changed_since(generation); });
  if (generation > 0) options.rendezvous_timeout(std::min(options_.rendezvous_timeout(), kReformTimeout));
  std::unique_ptr<ProcessGroup> group;
  try {
    group = std::make_unique<ProcessGroup>(init_process_group(options));
  } catch (const CommError&) {
    if (announced_generation() > generation) return false;  // a member was lost while the group formed
    throw;
  }
  if (group_) {
    group_->abandon();
    abandoned_.push_back(std::move(group_));
  }
  group_ = std::move(group);
  store_ = store;
  generation_ = generation;
  members_ = members;
  votes_ = 0;
  admit_to_ = generation;
  return true;
}

bool ElasticWorld::should_commit() {
  const std::string count = "vote/" + std::to_string(++votes_);
  const std::string decision = count + "/decision";
  const int size = group_->size();
  std::vector<uint8_t> word;
  try {
    // The deciding voter names the newest generation: joins announced by then are admitted after this step.
    if (store_->add(count, 1) == size)
      store_->compareSet(decision, {}, bytes("commit " + std::to_string(announced_generation())));
    const auto deadline = Clock::now() + options_.collective_timeout();
    for (;;) {
      try {
        store_->wait({decision}, Work::kInterruptSlice);
        word = store_->get(decision);
        break;
      } catch (const std::exception&) {
        if (!changed_since(generation_).empty()) {  // a rank was lost (a join waits for the decision)
          word = store_->compareSet(decision, {}, bytes("abort"));  // the first word stands
          break;
        }
        if (Clock::now() >= deadline) {
          throw CommError(group_->rank(), "should_commit #" + std::to_string(votes_),
                          "only " + std::to_string(store_->add(count, 0)) + " of " + std::to_string(size) +
                              " ranks voted within the collective timeout (" +
                              detail::seconds_text(options_.collective_timeout()) +
                              "), and the launcher announced no loss");
        }
      }
    }
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(group_->rank(), "should_commit #" + std::to_string(votes_),
                    std::string("lost the launcher's store: ") + e.what());
  }
  const std::string said = text(word);
  if (said.rfind("commit ", 0) != 0) return false;
  admit_to_ = std::max(generation_, std::atoi(said.c_str() + 7));
  return true;
}

MembershipChange ElasticWorld::reform() {
  MembershipChange change;
  change.old_size = static_cast<int>(members_.size());
  const int old_generation = generation_;
  const std::vector<int> old_members = members_;
  // After a committed vote that admits joiners the change is there already. The wait is in slices: one
  // long wait would hold the store's connection, which the group's heartbeat thread also writes through
  // (a launcher would take the silent rank for a stopped one).
  const auto announce_timeout = std::min(options_.collective_timeout(), kAnnounceTimeout);
  const auto give_up = Clock::now() + announce_timeout;
  for (;;) {
    try {
      elastic_->wait({lockstep::detail::change_key(old_generation + 1)}, kAnnounceSlice);
      break;
    } catch (const std::exception&) {
      if (Clock::now() < give_up) continue;
      throw CommError(group_->rank(), kOp,
                      "a step failed, but the launcher announced no lost rank within " +
                          detail::seconds_text(announce_timeout) +
                          ": the failure was not a lost rank (see the error that led here)");
    }
  }
  const auto deadline = Clock::now() + kReformTimeout;
  while (!form(std::max({announced_generation(), old_generation + 1, admit_to_}), deadline)) {
  }
  for (int id : old_members) {
    if (std::find(members_.begin(), members_.end(), id) != members_.end()) continue;
    change.left.push_back(id);
    change.why.push_back(reason_lost(id, generation_));
  }
  for (int id : members_) {
    if (std::find(old_members.begin(), old_members.end(), id) == old_members.end())
      change.joined.push_back(id);
  }
  change.generation = generation_;
  change.new_size = static_cast<int>(members_.size());
  change.new_rank = group_->rank();
  change.seconds_since_seen =
      static_cast<double>(lockstep::detail::unix_ms_now() - record(old_generation + 1).seen_ms) / 1000.0;
  return change;
}

void ElasticWorld::shutdown() {
  if (!group_ || finished_) return;
  finished_ = true;
  group_->leave();  // the launcher serves the store: no rank needs to wait for the others
  try {
    elastic_->set(lockstep::detail::finished_key(id_), bytes("1"));
    elastic_->add(lockstep::detail::kFinishedKey, 1);
  } catch (const std::exception&) {  // the store's launcher is gone: no one is left to tell
  }
}

}  // namespace lockstep::comm
