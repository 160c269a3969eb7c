#include <nlohmann/json.hpp>
#include <vector>

#include "parse.h"
#include "sources.h"

// TF_CONFIG, TensorFlow's cluster spec for MultiWorkerMirroredStrategy:
//   {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]},
//    "task": {"type": "worker", "index": 1}}
// As in TensorFlow, the chief (at most one) is rank 0 and the workers follow it, so the task above is
// rank 2 of 3. Each task is its own node with one rank; the master is the first task's host:port.
// Other job types in "cluster" (ps, evaluator) are not part of the data-parallel world and are
// ignored; a task of such a type is an error.

namespace lockstep::env::detail {
namespace {

using nlohmann::json;

class TfConfigReader {
 public:
  explicit TfConfigReader(std::string text) : text_(std::move(text)) {}

  Layout read(const EnvLookup& lookup) {
    json root;
    try {
      root = json::parse(text_);
    } catch (const json::exception& e) {
      throw EnvError(describe("TF_CONFIG", text_) + " is not JSON (" + e.what() +
                     "); expected {\"cluster\": {\"worker\": [\"host:port\", ...]}, \"task\": "
                     "{\"type\": \"worker\", \"index\": 0}}");
    }
    if (!root.is_object()) fail("the top level is not a JSON object");
    const json& cluster = member(root, "cluster", "");
    if (!cluster.is_object()) fail("cluster is not an object of job names to host:port lists");
    const std::vector<std::string> chiefs = host_list(cluster, "chief");
    const std::vector<std::string> workers = host_list(cluster, "worker");
    if (chiefs.size() > 1) {
      fail("cluster.chief has " + std::to_string(chiefs.size()) + " entries; TensorFlow allows at most one");
    }
    if (chiefs.empty() && workers.empty()) fail("cluster has neither a chief nor any worker");

    const json& task = member(root, "task", "");
    if (!task.is_object()) fail("task is not an object like {\"type\": \"worker\", \"index\": 0}");
    const json& type_json = member(task, "type", "task.");
    if (!type_json.is_string()) fail("task.type is not a string");
    const std::string type = type_json.get<std::string>();
    const json& index_json = member(task, "index", "task.");
    if (!index_json.is_number_integer()) fail("task.index=" + index_json.dump() + " is not an integer");

    const std::vector<std::string>* list = nullptr;
    if (type == "chief") {
      list = &chiefs;
    } else if (type == "worker") {
      list = &workers;
    } else {
      fail("task.type='" + type + "' is not part of data-parallel training: use \"chief\" or \"worker\"");
    }
    if (list->empty()) fail("task.type is '" + type + "' but cluster has no " + type + " entries");
    // Non-negative JSON integers are stored unsigned; a negative one is out of range too.
    if (!index_json.is_number_unsigned() || index_json.get<unsigned long long>() >= list->size()) {
      fail("task.index=" + index_json.dump() + " is out of range for cluster." + type + " (" +
           std::to_string(list->size()) + " entries): task.index must be in [0, " +
           std::to_string(static_cast<long long>(list->size()) - 1) + "]");
    }

    std::vector<std::pair<std::string, int>> tasks;  // chief first, then workers: rank order
    for (std::size_t i = 0; i < chiefs.size(); ++i) tasks.push_back(split_host_port(chiefs[i], "chief", i));
    for (std::size_t i = 0; i < workers.size(); ++i)
      tasks.push_back(split_host_port(workers[i], "worker", i));
    if (tasks.size() > static_cast<std::size_t>(kIntMax)) fail("the cluster is too large");
    const auto index = index_json.get<std::size_t>();

    Layout l;
    l.source = Source::kTfConfig;
    const int world = static_cast<int>(tasks.size());
    const int rank = static_cast<int>(index) + (type == "worker" ? static_cast<int>(chiefs.size()) : 0);
    const std::string from = "from TF_CONFIG";
    l.rank.set(rank, "rank", from + " task " + type + "[" + std::to_string(index) + "]");
    l.world_size.set(world, "world_size", from + " cluster size");
    l.local_rank.set(0, "local_rank", from + ": one rank per node");
    l.local_world_size.set(1, "local_world_size", from + ": one rank per node");
    l.node_rank.set(rank, "node_rank", from + ": one rank per node");
    l.num_nodes.set(world, "num_nodes", from + ": one rank per node");
    const std::string first = chiefs.empty() ? "cluster.worker[0]" : "cluster.chief[0]";
    l.master_addr.set(tasks.front().first, "master_addr", from + " " + first);
    l.master_port.set(tasks.front().second, "master_port", from + " " + first);
    read_master_override(lookup, l);
    return l;
  }

 private:
  [[noreturn]] void fail(const std::string& reason) const {
    throw EnvError("TF_CONFIG " + reason + " (" + describe("TF_CONFIG", text_) + ")");
  }

  const json& member(const json& object, const std::string& key, const std::string& path) const {
    const auto it = object.find(key);
    if (it == object.end()) fail("has no " + path + key);
    return *it;
  }

  // cluster[job] as a list of strings; empty when absent.
  std::vector<std::string> host_list(const json& cluster, const std::string& job) const {
    const auto it = cluster.find(job);
    if (it == cluster.end()) return {};
    if (!it->is_array()) fail("cluster." + job + " is not a list of \"host:port\" strings");
    std::vector<std::string> hosts;
    for (const auto& entry : *it) {
      if (!entry.is_string()) {
        fail("cluster." + job + " entry " + entry.dump() + " is not a \"host:port\" string");
      }
      hosts.push_back(entry.get<std::string>());
    }
    return hosts;
  }

  // "host:port" or "[ipv6]:port".
  std::pair<std::string, int> split_host_port(const std::string& entry, const std::string& job,
                                              std::size_t i) const {
    const std::string where = "cluster." + job + "[" + std::to_string(i) + "]='" + entry + "'";
    std::string host;
    std::string port;
    if (!entry.empty() && entry[0] == '[') {
      const std::size_t close = entry.find(']');
      if (close == std::string::npos || entry.compare(close + 1, 1, ":") != 0) {
        fail(where + " is not host:port or [ipv6]:port");
      }
      host = entry.substr(1, close - 1);
      port = entry.substr(close + 2);
    } else {
      const std::size_t colon = entry.rfind(':');
      if (colon == std::string::npos || entry.find(':') != colon) {
        fail(where + " is not host:port (write an IPv6 address as [address]:port)");
      }
      host = entry.substr(0, colon);
      port = entry.substr(colon + 1);
    }
    if (host.empty()) fail(where + " has an empty host");
    const auto number = try_parse_digits(port);
    if (!number || *number < 1 || *number > 65535) {
      fail(where + " has port '" + port + "', which is not an integer in [1, 65535]");
    }
    return {host, static_cast<int>(*number)};
  }

  std::string text_;
};

}  // namespace

Layout read_tf_config(const EnvLookup& lookup) {
  return TfConfigReader(lookup("TF_CONFIG").value_or("")).read(lookup);
}

}  // namespace lockstep::env::detail
