// Communicator: the one collective interface of the project (MPI for CPU
// ranks, NCCL for GPU ranks, single-rank) over Tensor views, plus the
// single-rank implementation.
//
// Buffers are contiguous tensors; counts are numel. On the CPU (MPI, single)
// every call has completed when it returns. With NCCL a call on device
// buffers is enqueued on the communicator's stream and its result is visible
// to later work on that stream; synchronize() waits for all of it (polling,
// so the watchdog can act). all_reduce and broadcast also take host buffers
// on every implementation (the step's scalars: losses, norms, flags); those
// calls have completed when they return (NCCL stages them through a small
// device buffer). All ranks of a group issue the same calls in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kernels/tensor.h"

namespace trainer::parallel {

class Watchdog;

enum class ReduceOp { sum, avg, max };
const char* reduce_op_name(ReduceOp op);

// One send or receive of a batch_p2p call.
struct P2pOp {
  enum Kind { send, recv };
  Kind kind = send;
  Tensor buf;
  int peer = -1;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The axis it serves ("dp", "tp", ..., "world"): named in every error message.
  const std::string& name() const { return name_; }
  // The watchdog every call registers with (nullptr = unguarded).
  void set_watchdog(Watchdog* dog) { watchdog_ = dog; }

  // buf (n): in place, every rank ends with op over all ranks' buf.
  virtual void all_reduce(Tensor buf, ReduceOp op) = 0;
  // send (size*n) -> recv (n): recv = op over ranks of send[rank*n, (rank+1)*n).
  // recv may be exactly that block of send (in place).
  virtual void reduce_scatter(Tensor send, Tensor recv, ReduceOp op) = 0;
  // send (n) -> recv (size*n): recv[r*n, (r+1)*n) = rank r's send. send may
  // be exactly block `rank` of recv (in place).
  virtual void all_gather(Tensor send, Tensor recv) = 0;
  // buf (n): root's buf to every rank.
  virtual void broadcast(Tensor buf, int root) = 0;
  // Point to point; a matching recv/send must be posted by `peer`.
  virtual void send(Tensor buf, int peer) = 0;
  virtual void recv(Tensor buf, int peer) = 0;
  // Both at once (pipeline neighbours exchanging in opposite directions);
  // either side may be empty (data == nullptr) to skip it.
  virtual void send_recv(Tensor send_buf, int send_peer, Tensor recv_buf, int recv_peer) = 0;
  // A send that returns before the peer receives (pipeline schedules deadlock
  // on rendezvous sends): buf may be reused at once; wait_sends() completes
  // every isend issued so far. The default is the blocking send (single rank,
  // NCCL, whose sends are already asynchronous to the host).
  virtual void isend(Tensor buf, int peer) { send(buf, peer); }
  virtual void wait_sends() {}
  // Sends and receives issued as one batch. NCCL runs them as one group: its
  // sends and receives may each wait for the peer's matching call, so
  // neighbours exchanging both ways (1F1B's steady state) must pair them or
  // deadlock. The default issues the sends as isend, then the receives
  // (blocking), each kind in the order given (MPI's pipeline behaviour).
  virtual void batch_p2p(std::span<const P2pOp> ops);
  // send packs send_counts[p] elements for each peer p in peer order; recv
  // receives recv_counts[p] from each p in peer order. Counts may be zero and
  // must agree pairwise (exchange them first with a 1-element all_to_allv).
  virtual void all_to_allv(Tensor send, std::span<const int64_t> send_counts, Tensor recv,
                           std::span<const int64_t> recv_counts) = 0;
  virtual void barrier() = 0;
  // Waits until every call issued so far has completed (no-op on the CPU).
  virtual void synchronize() {}
  // Tears the communicator down without waiting for peers (watchdog, errors).
  virtual void abort() noexcept {}

 protected:
  Communicator(std::string name, int rank, int size)
      : rank_(rank), size_(size), name_(std::move(name)) {}
  Watchdog* watchdog() const { return watchdog_; }

 private:
  int rank_;
  int size_;
  std::string name_;
  Watchdog* watchdog_ = nullptr;
};

// Copies n bytes between two buffers on `device` (set by the CUDA build for
// single-rank GPU runs; host memcpy otherwise).
using DeviceCopy = void (*)(void* dst, const void* src, size_t bytes, Device device);

// A group of one rank: every collective is the identity (copies where the
// output is another buffer); send/recv to oneself is refused.
std::unique_ptr<Communicator> make_single_communicator(std::string name,
                                                       DeviceCopy copy = nullptr);

// Shared argument checks of every implementation (InputError-free: a failed
// check is a programming error and throws Error naming the axis and op).
void check_buffer(const Communicator& comm, const char* op, const Tensor& t);
void check_count(const Communicator& comm, const char* op, const Tensor& t, int64_t expected,
                 const char* what);

}  // namespace trainer::parallel
