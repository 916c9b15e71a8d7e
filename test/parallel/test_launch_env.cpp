// Launch-environment detection for each launcher, Slurm nodelist expansion and
// the rendezvous address.
#include <catch2/catch.hpp>

#include "kernels/error.h"
#include "parallel/launch_env.h"

using namespace trainer;
using namespace trainer::parallel;

TEST_CASE("no launcher: one rank", "[cpu]") {
  const LaunchEnv e = detect_launch_env(EnvMap{{"HOME", "/root"}});
  REQUIRE(e.launcher == "none");
  REQUIRE((e.rank == 0 && e.world == 1 && e.local_rank == 0 && e.local_world == 1));
}

TEST_CASE("Open MPI variables", "[cpu]") {
  const LaunchEnv e = detect_launch_env(EnvMap{{"OMPI_COMM_WORLD_RANK", "5"},
                                               {"OMPI_COMM_WORLD_SIZE", "8"},
                                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                               // mpirun inside an allocation: OMPI wins
                                               {"SLURM_PROCID", "0"},
                                               {"SLURM_NTASKS", "2"},
                                               {"SLURM_STEP_ID", "0"},
                                               {"SLURM_JOB_NODELIST", "gpu[07-08]"}});
  REQUIRE(e.launcher == "openmpi");
  REQUIRE((e.rank == 5 && e.world == 8 && e.local_rank == 1 && e.local_world == 4));
  REQUIRE(e.nodelist == "gpu[07-08]");
}

TEST_CASE("MPICH / Intel MPI PMI variables", "[cpu]") {
  const LaunchEnv e = detect_launch_env(
      EnvMap{{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "1"},
             {"MPI_LOCALNRANKS", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "12345"}});
  REQUIRE(e.launcher == "pmi");
  REQUIRE((e.rank == 3 && e.world == 4 && e.local_rank == 1 && e.local_world == 2));
  REQUIRE(e.master_addr == "10.0.0.1");
  REQUIRE(e.master_port == 12345);
  const RendezvousAddress a = rendezvous_address(e);
  REQUIRE((a.host == "10.0.0.1" && a.port == 12345));
}

TEST_CASE("Slurm srun variables", "[cpu]") {
  const EnvMap env{{"SLURM_PROCID", "6"},        {"SLURM_NTASKS", "8"},
             {"SLURM_LOCALID", "2"},       {"SLURM_STEP_ID", "0"},
             {"SLURM_NODEID", "1"},        {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
             {"SLURM_JOB_NODELIST", "node[01-02]"}};
  LaunchEnv e = detect_launch_env(env);
  REQUIRE(e.launcher == "slurm");
  REQUIRE((e.rank == 6 && e.world == 8 && e.local_rank == 2 && e.local_world == 4));
  REQUIRE(rendezvous_address(e).host == "node01");
  REQUIRE(rendezvous_address(e).port == 29500);

  // Uneven nodes: 3 tasks on node 0, 5 on node 1.
  e = detect_launch_env(EnvMap{{"SLURM_PROCID", "7"},
                               {"SLURM_NTASKS", "8"},
                               {"SLURM_LOCALID", "4"},
                               {"SLURM_STEP_ID", "0"},
                               {"SLURM_NODEID", "1"},
                               {"SLURM_STEP_TASKS_PER_NODE", "3,5"}});
  REQUIRE(e.local_world == 5);

  // A batch script (no job step) is one process, whatever SLURM_NTASKS says.
  EnvMap batch{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "0"}};
  REQUIRE(detect_launch_env(batch).world == 1);
}

TEST_CASE("inconsistent launch variables are refused", "[cpu]") {
  auto error_of = [](EnvMap env) {
    try {
      detect_launch_env(env);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  REQUIRE(error_of({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}) ==
          "launch environment: OMPI_COMM_WORLD_RANK=4 is not in [0, OMPI_COMM_WORLD_SIZE=4)");
  REQUIRE(error_of({{"PMI_RANK", "1"}}) == "launch environment: PMI_RANK is set but PMI_SIZE is not");
  REQUIRE(error_of({{"PMI_RANK", "x1"}, {"PMI_SIZE", "2"}}) ==
          "launch environment: PMI_RANK=\"x1\" is not an integer");
  REQUIRE(error_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}}) ==
          "launch environment: PMI_SIZE=0 must be at least 1");
  REQUIRE(error_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}) ==
          "launch environment (openmpi): local rank 2 is not in [0, local size 2)");
  REQUIRE(error_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}}) ==
          "launch environment (openmpi): local size 8 is not in [1, world 4]");
  REQUIRE(error_of({{"MASTER_PORT", "70000"}}) ==
          "launch environment: MASTER_PORT=70000 is not a TCP port");
  // Tasks per node: counts that would overflow int, a repeat below 1, a negative node.
  const EnvMap step{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"},
                    {"SLURM_LOCALID", "0"}};
  auto with = [&](EnvMap extra) {
    EnvMap env = step;
    env.insert(extra.begin(), extra.end());
    return env;
  };
  REQUIRE(detect_launch_env(with({{"SLURM_NODEID", "5"},
                                  {"SLURM_STEP_TASKS_PER_NODE", "1(x2147483647),2"}}))
              .local_world == 1);
  // Node 2147483620 is in the second group; index + repeat there passes INT_MAX.
  REQUIRE(error_of(with({{"SLURM_NODEID", "2147483620"},
                         {"SLURM_STEP_TASKS_PER_NODE", "1(x2147483600),7(x100)"}})) ==
          "launch environment (slurm): local size 7 is not in [1, world 4]");
  REQUIRE(error_of(with({{"SLURM_NODEID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x0)"}})) ==
          "launch environment: SLURM_STEP_TASKS_PER_NODE=\"2(x0)\": a repeat count below 1");
  REQUIRE(error_of(with({{"SLURM_NODEID", "-1"}, {"SLURM_STEP_TASKS_PER_NODE", "2"}})) ==
          "launch environment: SLURM_NODEID=-1 is negative");
}

TEST_CASE("Slurm nodelist expansion", "[cpu]") {
  using V = std::vector<std::string>;
  REQUIRE(expand_nodelist("node01") == V{"node01"});
  REQUIRE(expand_nodelist("node[01-04,07]") ==
          V{"node01", "node02", "node03", "node04", "node07"});
  REQUIRE(expand_nodelist("a[8-10],b,c[3]") == V{"a8", "a9", "a10", "b", "c3"});
  REQUIRE(expand_nodelist("rack[1-2]-n[01-02]") ==
          V{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"});
  REQUIRE(expand_nodelist("gpu-[098-101]") == V{"gpu-098", "gpu-099", "gpu-100", "gpu-101"});
  REQUIRE_THROWS_AS(expand_nodelist("node[01-04"), InputError);
  REQUIRE_THROWS_AS(expand_nodelist("node[04-01]"), InputError);
  REQUIRE_THROWS_AS(expand_nodelist("node[a-b]"), InputError);
  REQUIRE_THROWS_AS(expand_nodelist("node[[1]]"), InputError);
  REQUIRE_THROWS_WITH(expand_nodelist("n[1-"), "nodelist \"n[1-\": unclosed '['");
  // Bracket groups multiply; a list past 2^17 hosts is refused before it is built
  // (a[0-999999]b[0-999999] would be 10^12 names; found by test/fuzz/fuzz_launch_env).
  REQUIRE(expand_nodelist("a[0-511]b[0-255]").size() == 131072);
  REQUIRE_THROWS_WITH(expand_nodelist("a[0-999999]b[0-999999]"),
                      "nodelist \"a[0-999999]b[0-999999]\": more than 131072 hosts");
  REQUIRE_THROWS_WITH(expand_nodelist("a[0-511]b[0-255],c"), "nodelist \"a[0-511]b[0-255],c\": more than 131072 hosts");
}

TEST_CASE("rendezvous address without MASTER_ADDR or nodelist", "[cpu]") {
  LaunchEnv e;
  e.world = 4;
  e.local_world = 4;
  REQUIRE(rendezvous_address(e).host == "127.0.0.1");
  e.local_world = 2;
  REQUIRE_THROWS_AS(rendezvous_address(e), InputError);
}
