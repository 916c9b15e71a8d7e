// A rank for test/parallel/launch_test.sh, started by the bundle's launch.sh:
//   launch_probe rendezvous     rank 0's random bytes reach every rank through
//                               bootstrap_broadcast (the NCCL id's path: in an
//                               MPI build MPI is tried first and, as launch.sh
//                               is no MPI launcher, the TCP rendezvous is used)
//   launch_probe fail K CODE    rank K exits with CODE at once; the others wait
//   launch_probe wait DIR       writes DIR/ready.R, records SIGUSR1 in DIR/usr1.R,
//                               exits 0 on SIGTERM/SIGINT after writing DIR/got.R
//   launch_probe ignore DIR     ignores SIGTERM (as a rank stuck in a collective
//                               would seem to); rank 0 exits 4 once all are ready
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "parallel/bootstrap.h"
#include "parallel/launch_env.h"

using namespace trainer::parallel;
namespace fs = std::filesystem;

namespace {

volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_usr1 = 0;
void on_signal(int s) {
  if (s == SIGUSR1)
    g_usr1 = 1;
  else
    g_signal = s;
}

void touch(const fs::path& p, const std::string& text) { std::ofstream(p) << text << "\n"; }

int rendezvous(const LaunchEnv& env) {
  std::vector<uint8_t> payload;
  if (env.rank == 0) {
    std::random_device rd;
    for (int i = 0; i < 16; ++i) payload.push_back(static_cast<uint8_t>(rd()));
  }
  const Bootstrapped got = bootstrap_broadcast(env, payload, 30.0);
  std::string hex;
  for (uint8_t b : got.bytes) {
    char h[3];
    std::snprintf(h, sizeof h, "%02x", b);
    hex += h;
  }
  std::printf("rank %d of %d local %d of %d via %s payload %s\n", env.rank, env.world,
              env.local_rank, env.local_world, got.via.c_str(), hex.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const LaunchEnv env = detect_launch_env();
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "rendezvous") return rendezvous(env);
    if (mode == "fail" && argc >= 4) {  // a 5th argument only tags the process
      if (env.rank == std::atoi(argv[2])) return std::atoi(argv[3]);
      std::this_thread::sleep_for(std::chrono::seconds(60));
      return 0;
    }
    if ((mode == "wait" || mode == "ignore") && argc == 3) {
      const fs::path dir = argv[2];
      struct sigaction sa {};
      sa.sa_handler = mode == "wait" ? on_signal : SIG_IGN;
      sigaction(SIGTERM, &sa, nullptr);
      sigaction(SIGINT, &sa, nullptr);
      sa.sa_handler = on_signal;
      sigaction(SIGUSR1, &sa, nullptr);
      touch(dir / ("ready." + std::to_string(env.rank)), std::to_string(getpid()));
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      bool usr1_written = false;
      while (std::chrono::steady_clock::now() < end) {
        if (g_usr1 && !usr1_written) {
          touch(dir / ("usr1." + std::to_string(env.rank)), "USR1");
          usr1_written = true;
        }
        if (g_signal) {
          touch(dir / ("got." + std::to_string(env.rank)), g_signal == SIGTERM ? "TERM" : "INT");
          return 0;
        }
        if (mode == "ignore" && env.rank == 0) {
          int ready = 0;
          for (int r = 0; r < env.world; ++r) ready += fs::exists(dir / ("ready." + std::to_string(r)));
          if (ready == env.world) return 4;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return 9;  // nobody stopped us
    }
    std::fprintf(stderr, "usage: launch_probe rendezvous | fail K CODE | wait DIR | ignore DIR\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launch_probe: %s\n", e.what());
    return 1;
  }
}
