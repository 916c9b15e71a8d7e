// parallel/launch_env: the launcher's variables (Open MPI, PMI, Slurm: rank,
// sizes, tasks per node, the compressed nodelist, MASTER_ADDR/PORT) are
// refused with one line naming the variable, or give a consistent place: rank
// in [0, world), local rank in [0, local size], local size in [1, world], and
// a rendezvous host.
//
// Input: one KEY=VALUE per line.
#include "parallel/launch_env.h"
#include "test/fuzz/fuzz_target.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  parallel::EnvMap env;
  for (size_t b = 0, e; b < text.size(); b = e + 1) {
    e = text.find('\n', b);
    if (e == std::string_view::npos) e = text.size();
    const std::string_view line = text.substr(b, e - b);
    const size_t eq = line.find('=');
    if (eq != std::string_view::npos) env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  fuzz::expect_only_input_errors([&] {
    const parallel::LaunchEnv e = parallel::detect_launch_env(env);
    if (e.world < 1 || e.rank < 0 || e.rank >= e.world) fuzz::fail("rank outside the world");
    if (e.local_world < 1 || e.local_world > e.world || e.local_rank < 0 || e.local_rank >= e.local_world)
      fuzz::fail("local rank or size outside the world");
    const parallel::RendezvousAddress a = parallel::rendezvous_address(e);
    if (a.host.empty() || a.port <= 0 || a.port >= 65536) fuzz::fail("no rendezvous address");
  });
  if (auto it = env.find("SLURM_JOB_NODELIST"); it != env.end()) {
    fuzz::expect_only_input_errors([&] {
      if (parallel::expand_nodelist(it->second).empty()) fuzz::fail("an accepted nodelist of no host");
    });
  }
  return 0;
}
