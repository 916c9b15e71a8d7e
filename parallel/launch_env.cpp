// Launch-environment detection and Slurm nodelist expansion (see launch_env.h).
#include "parallel/launch_env.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/error.h"

extern char** environ;

namespace trainer::parallel {
namespace {

const std::string* find(const EnvMap& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

int parse_int(const std::string& text, const char* key) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  TRAINER_INPUT_CHECK(ec == std::errc() && ptr == end && !text.empty(),
                      "launch environment: {}={:?} is not an integer", key, text);
  return value;
}

// Reads one launcher's variables; rank and size must come together.
bool read_launcher(const EnvMap& env, const char* name, const char* rank_key,
                   const char* size_key, const char* local_rank_key,
                   const char* local_size_key, LaunchEnv& out) {
  const std::string* rank = find(env, rank_key);
  const std::string* size = find(env, size_key);
  if (!rank && !size) return false;
  TRAINER_INPUT_CHECK(rank && size, "launch environment: {} is set but {} is not",
                      rank ? rank_key : size_key, rank ? size_key : rank_key);
  out.launcher = name;
  out.rank = parse_int(*rank, rank_key);
  out.world = parse_int(*size, size_key);
  TRAINER_INPUT_CHECK(out.world >= 1, "launch environment: {}={} must be at least 1", size_key,
                      out.world);
  TRAINER_INPUT_CHECK(out.rank >= 0 && out.rank < out.world,
                      "launch environment: {}={} is not in [0, {}={})", rank_key, out.rank,
                      size_key, out.world);
  const std::string* local_rank = local_rank_key ? find(env, local_rank_key) : nullptr;
  const std::string* local_size = local_size_key ? find(env, local_size_key) : nullptr;
  out.local_rank = local_rank ? parse_int(*local_rank, local_rank_key) : 0;
  out.local_world = local_size ? parse_int(*local_size, local_size_key) : 0;
  if (!local_rank && !local_size && out.world == 1) out.local_world = 1;
  return true;
}

// SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE: "4(x2),3" = 4,4,3 tasks on nodes 0,1,2.
int slurm_tasks_on_node(const std::string& text, int node, const char* key) {
  TRAINER_INPUT_CHECK(node >= 0, "launch environment: SLURM_NODEID={} is negative", node);
  int index = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    int repeat = 1;
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      TRAINER_INPUT_CHECK(item.back() == ')', "launch environment: {}={:?} is malformed", key, text);
      repeat = parse_int(item.substr(paren + 2, item.size() - paren - 3), key);
      item = item.substr(0, paren);
    }
    TRAINER_INPUT_CHECK(repeat >= 1, "launch environment: {}={:?}: a repeat count below 1", key, text);
    const int tasks = parse_int(item, key);
    if (node - index < repeat) return tasks;  // node < index + repeat, without overflow
    index += repeat;  // repeat <= node - index here: no overflow
    pos = comma + 1;
  }
  TRAINER_INPUT_CHECK(false, "launch environment: {}={:?} has no entry for node {}", key, text,
                      node);
  return 0;
}

// Ten times the largest machines' node counts (El Capitan, Aurora: about 11k);
// what a malformed list may expand to before it is refused.
constexpr int64_t kMaxNodelistHosts = 1 << 17;

// Appends the expansions of one host expression (no top-level commas).
void expand_host(const std::string& expr, const std::string& whole,
                 std::vector<std::string>& out) {
  const size_t open = expr.find('[');
  if (open == std::string::npos) {
    TRAINER_INPUT_CHECK(expr.find(']') == std::string::npos && !expr.empty(),
                        "nodelist {:?}: malformed host {:?}", whole, expr);
    TRAINER_INPUT_CHECK(static_cast<int64_t>(out.size()) < kMaxNodelistHosts,
                        "nodelist {:?}: more than {} hosts", whole, kMaxNodelistHosts);
    out.push_back(expr);
    return;
  }
  const size_t close = expr.find(']', open);
  TRAINER_INPUT_CHECK(close != std::string::npos, "nodelist {:?}: unclosed '['", whole);
  const std::string prefix = expr.substr(0, open);
  const std::string ranges = expr.substr(open + 1, close - open - 1);
  const std::string rest = expr.substr(close + 1);
  TRAINER_INPUT_CHECK(!ranges.empty(), "nodelist {:?}: empty '[]'", whole);
  std::vector<std::string> tails;  // what follows the brackets, expanded once
  if (rest.empty()) tails.push_back("");
  else expand_host(rest, whole, tails);
  size_t pos = 0;
  while (pos <= ranges.size()) {
    size_t comma = ranges.find(',', pos);
    if (comma == std::string::npos) comma = ranges.size();
    const std::string item = ranges.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    const std::string lo_text = item.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : item.substr(dash + 1);
    const int lo = parse_int(lo_text, "SLURM_JOB_NODELIST");
    const int hi = parse_int(hi_text, "SLURM_JOB_NODELIST");
    TRAINER_INPUT_CHECK(lo <= hi && hi - lo < 1000000, "nodelist {:?}: bad range {:?}", whole,
                        item);
    const int width = static_cast<int>(lo_text.size());  // "01" keeps its zero
    // Several bracket groups multiply: "a[0-999999]b[0-999999]" would be 10^12 names.
    TRAINER_INPUT_CHECK(static_cast<int64_t>(hi - lo + 1) * static_cast<int64_t>(tails.size()) <=
                            kMaxNodelistHosts - static_cast<int64_t>(out.size()),
                        "nodelist {:?}: more than {} hosts", whole, kMaxNodelistHosts);
    for (int n = lo; n <= hi; ++n) {
      for (const std::string& tail : tails) {
        out.push_back(fmt::format("{}{:0{}d}{}", prefix, n, width, tail));
      }
    }
    pos = comma + 1;
  }
}

}  // namespace

LaunchEnv detect_launch_env(const EnvMap& env) {
  LaunchEnv e;
  bool found = read_launcher(env, "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", e);
  if (!found) {
    found = read_launcher(env, "pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                          "MPI_LOCALNRANKS", e);
  }
  const bool slurm_step = find(env, "SLURM_STEP_ID") || find(env, "SLURM_STEPID");
  if (!found && slurm_step) {
    const char* size_key = find(env, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS"
                                                              : "SLURM_NTASKS";
    found = read_launcher(env, "slurm", "SLURM_PROCID", size_key, "SLURM_LOCALID", nullptr, e);
    if (found && e.local_world == 0) {
      const char* per_node_key = find(env, "SLURM_STEP_TASKS_PER_NODE")
                                     ? "SLURM_STEP_TASKS_PER_NODE"
                                     : "SLURM_TASKS_PER_NODE";
      const std::string* per_node = find(env, per_node_key);
      const std::string* node_id = find(env, "SLURM_NODEID");
      if (per_node) {
        e.local_world = slurm_tasks_on_node(
            *per_node, node_id ? parse_int(*node_id, "SLURM_NODEID") : 0, per_node_key);
      }
    }
  }
  // Without a local size the ranks are assumed to share one node, the common
  // case of launching by hand; the GPU is still picked by local rank.
  if (e.local_world == 0) e.local_world = e.world;
  TRAINER_INPUT_CHECK(e.local_world >= 1 && e.local_world <= e.world,
                      "launch environment ({}): local size {} is not in [1, world {}]", e.launcher,
                      e.local_world, e.world);
  TRAINER_INPUT_CHECK(e.local_rank >= 0 && e.local_rank < e.local_world,
                      "launch environment ({}): local rank {} is not in [0, local size {})",
                      e.launcher, e.local_rank, e.local_world);

  if (const std::string* v = find(env, "SLURM_JOB_NODELIST")) e.nodelist = *v;
  else if (const std::string* v2 = find(env, "SLURM_NODELIST")) e.nodelist = *v2;
  if (const std::string* v = find(env, "MASTER_ADDR")) e.master_addr = *v;
  if (const std::string* v = find(env, "MASTER_PORT")) {
    e.master_port = parse_int(*v, "MASTER_PORT");
    TRAINER_INPUT_CHECK(e.master_port > 0 && e.master_port < 65536,
                        "launch environment: MASTER_PORT={} is not a TCP port", e.master_port);
  }
  return e;
}

LaunchEnv detect_launch_env() {
  EnvMap env;
  for (char** p = environ; p && *p; ++p) {
    const char* eq = std::strchr(*p, '=');
    if (eq) env.emplace(std::string(*p, eq - *p), std::string(eq + 1));
  }
  return detect_launch_env(env);
}

std::vector<std::string> expand_nodelist(const std::string& nodelist) {
  std::vector<std::string> hosts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= nodelist.size(); ++i) {
    const char ch = i < nodelist.size() ? nodelist[i] : ',';
    if (ch == '[') ++depth;
    if (ch == ']') --depth;
    TRAINER_INPUT_CHECK(depth >= 0 && depth <= 1, "nodelist {:?}: unbalanced brackets", nodelist);
    if (ch == ',' && depth == 0) {
      expand_host(nodelist.substr(start, i - start), nodelist, hosts);
      start = i + 1;
    }
  }
  TRAINER_INPUT_CHECK(depth == 0, "nodelist {:?}: unclosed '['", nodelist);
  return hosts;
}

RendezvousAddress rendezvous_address(const LaunchEnv& env) {
  RendezvousAddress a;
  if (env.master_port > 0) a.port = env.master_port;
  if (!env.master_addr.empty()) {
    a.host = env.master_addr;
  } else if (!env.nodelist.empty()) {
    a.host = expand_nodelist(env.nodelist).front();
  } else if (env.local_world == env.world) {
    a.host = "127.0.0.1";
  } else {
    TRAINER_INPUT_CHECK(false,
                        "launch environment: {} ranks on several nodes but neither MASTER_ADDR "
                        "nor SLURM_JOB_NODELIST is set (needed for the NCCL rendezvous)",
                        env.world);
  }
  return a;
}

}  // namespace trainer::parallel
