// LaunchEnv: who started this process and where it sits (rank, world, local
// rank) read from Open MPI, MPICH/Intel MPI (PMI) or Slurm variables; plus the
// Slurm nodelist parser and the rendezvous address NCCL's TCP bootstrap uses.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace trainer::parallel {

struct LaunchEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;   // picks the GPU
  int local_world = 1;
  std::string launcher = "none";  // "openmpi" | "pmi" | "slurm" | "none"
  std::string nodelist;           // SLURM_JOB_NODELIST as given (compressed), "" if unset
  std::string master_addr;        // MASTER_ADDR, "" if unset
  int master_port = 0;            // MASTER_PORT, 0 if unset
};

using EnvMap = std::map<std::string, std::string>;

// Reads the process environment. Precedence: Open MPI, then PMI, then Slurm
// (mpirun inside an allocation sets both; its OMPI_* values are the truth).
// Slurm counts only inside a job step (SLURM_STEP_ID set): a batch script
// itself also carries SLURM_PROCID=0 and SLURM_NTASKS=N. No launcher: one rank.
// Inconsistent or malformed values throw InputError naming the variable.
LaunchEnv detect_launch_env();
LaunchEnv detect_launch_env(const EnvMap& env);

// Expands Slurm's compressed host list: "node[01-04,07],gpu-a[1-2]-x" ->
// node01 node02 node03 node04 node07 gpu-a1-x gpu-a2-x (zero padding kept,
// several bracket groups in one name form their product). InputError on
// malformed input.
std::vector<std::string> expand_nodelist(const std::string& nodelist);

// Where rank 0 listens for the TCP rendezvous: MASTER_ADDR, else the first
// host of SLURM_JOB_NODELIST, else 127.0.0.1 when every rank is on this node;
// port MASTER_PORT or 29500. InputError when no address can be known.
struct RendezvousAddress {
  std::string host;
  int port = 29500;
};
RendezvousAddress rendezvous_address(const LaunchEnv& env);

}  // namespace trainer::parallel
