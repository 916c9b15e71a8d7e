// The NCCL Communicator for GPU ranks and its bootstrap. Compiled with
// TRAINER_NCCL (a CUDA build that found NCCL); elsewhere nccl_available() is
// false and the factories refuse with an Error.
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/launch_env.h"

namespace trainer::parallel {

bool nccl_available();
// comm is an NCCL communicator (not MPI, not a single-rank group).
bool is_nccl(const Communicator& comm);

// cudaSetDevice(local_rank); rank 0's ncclUniqueId reaches every rank by
// bootstrap_broadcast (MPI_Bcast when MPI sees the whole world, else the TCP
// rendezvous at rendezvous_address(env)); then ncclCommInitRankConfig
// (non-blocking, so the watchdog can abort it), waiting at most timeout_s.
// Host buffers given to all_reduce/broadcast go through a 4 KiB pinned and
// device staging pair per communicator (allocated here, never during a step).
std::unique_ptr<Communicator> make_nccl_world(const LaunchEnv& env, double timeout_s);
// ncclCommSplit of an NCCL communicator; every rank of `parent` calls it in the same order.
std::unique_ptr<Communicator> nccl_split(Communicator& parent, int color, int key,
                                         std::string name, double timeout_s);
// The cudaStream_t later calls of an NCCL communicator are enqueued on
// (default: a non-blocking stream it owns; nullptr restores it). No-op for
// other communicators.
void nccl_set_stream(Communicator& comm, void* cuda_stream);
// ncclCommAbort of every NCCL communicator alive in this process (the
// watchdog's last act: also those the mesh does not own, e.g. KV-replica groups).
void nccl_abort_all() noexcept;
// Device-to-device copy for the single-rank communicator of a GPU run,
// ordered after all queued GPU work and complete on return.
void cuda_device_copy(void* dst, const void* src, size_t bytes, Device device);

}  // namespace trainer::parallel
