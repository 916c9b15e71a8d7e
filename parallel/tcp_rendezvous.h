// A minimal TCP rendezvous: rank 0 listens and hands a small blob (the NCCL
// unique id) to every other rank; used when NCCL is bootstrapped without MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer::parallel {

// Rank 0 passes `payload`, listens on host:port and sends it to world-1
// connecting ranks; the others connect (retrying until timeout_s) and return
// it. Each client also sends its rank so rank 0 can detect duplicates.
// Throws Error naming host, port and what failed.
std::vector<uint8_t> tcp_broadcast(const std::string& host, int port, int rank, int world,
                                   const std::vector<uint8_t>& payload, double timeout_s);

}  // namespace trainer::parallel
