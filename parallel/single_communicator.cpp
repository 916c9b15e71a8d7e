// The single-rank Communicator and the argument checks all implementations share.
#include <cstring>

#include "kernels/error.h"
#include "parallel/communicator.h"
#include "parallel/watchdog.h"

namespace trainer::parallel {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

void check_buffer(const Communicator& comm, const char* op, const Tensor& t) {
  TRAINER_CHECK(t.data != nullptr || t.numel() == 0, "{} on axis {}: null buffer {}", op,
                comm.name(), t.str());
  TRAINER_CHECK(t.contiguous(), "{} on axis {}: buffer {} is not contiguous", op, comm.name(),
                t.str());
}

void check_count(const Communicator& comm, const char* op, const Tensor& t, int64_t expected,
                 const char* what) {
  TRAINER_CHECK(t.numel() == expected, "{} on axis {}: {} has {} elements, expected {}", op,
                comm.name(), what, t.numel(), expected);
}

void Communicator::batch_p2p(std::span<const P2pOp> ops) {
  // isends first (they return at once), so no receive waits on a send of its own batch.
  for (const P2pOp& op : ops)
    if (op.kind == P2pOp::send) isend(op.buf, op.peer);
  for (const P2pOp& op : ops)
    if (op.kind == P2pOp::recv) recv(op.buf, op.peer);
}

namespace {

class SingleCommunicator final : public Communicator {
 public:
  SingleCommunicator(std::string name, DeviceCopy copy)
      : Communicator(std::move(name), 0, 1), copy_(copy) {}

  void all_reduce(Tensor buf, ReduceOp) override { check_buffer(*this, "all_reduce", buf); }
  void reduce_scatter(Tensor send, Tensor recv, ReduceOp) override {
    check_count(*this, "reduce_scatter", recv, send.numel(), "recv");
    copy(recv, send);
  }
  void all_gather(Tensor send, Tensor recv) override {
    check_count(*this, "all_gather", recv, send.numel(), "recv");
    copy(recv, send);
  }
  void broadcast(Tensor buf, int root) override {
    TRAINER_CHECK(root == 0, "broadcast on axis {}: root {} outside a group of 1", name(), root);
  }
  void send(Tensor, int peer) override { refuse_p2p("send", peer); }
  void recv(Tensor, int peer) override { refuse_p2p("recv", peer); }
  void send_recv(Tensor s, int send_peer, Tensor r, int recv_peer) override {
    if (!s.empty()) refuse_p2p("send", send_peer);
    if (!r.empty()) refuse_p2p("recv", recv_peer);
  }
  void all_to_allv(Tensor send, std::span<const int64_t> send_counts, Tensor recv,
                   std::span<const int64_t> recv_counts) override {
    TRAINER_CHECK(send_counts.size() == 1 && recv_counts.size() == 1 &&
                      send_counts[0] == recv_counts[0],
                  "all_to_allv on axis {}: a group of 1 needs one matching count", name());
    check_count(*this, "all_to_allv", send, send_counts[0], "send");
    check_count(*this, "all_to_allv", recv, recv_counts[0], "recv");
    copy(recv, send);
  }
  void barrier() override {}

 private:
  void copy(const Tensor& dst, const Tensor& src) {
    check_buffer(*this, "copy", dst);
    check_buffer(*this, "copy", src);
    TRAINER_CHECK(dst.dtype == src.dtype && dst.device == src.device,
                  "axis {}: {} and {} differ in dtype or device", name(), dst.str(), src.str());
    if (dst.data == src.data || dst.nbytes() == 0) return;
    if (dst.device == Device::cpu) {
      std::memcpy(dst.data, src.data, dst.nbytes());
    } else {
      TRAINER_CHECK(copy_ != nullptr, "axis {}: no device copy for {}", name(), dst.str());
      copy_(dst.data, src.data, dst.nbytes(), dst.device);
    }
  }
  void refuse_p2p(const char* op, int peer) {
    TRAINER_CHECK(false, "{} on axis {}: peer {} in a group of 1", op, name(), peer);
  }

  DeviceCopy copy_;
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator(std::string name, DeviceCopy copy) {
  return std::make_unique<SingleCommunicator>(std::move(name), copy);
}

}  // namespace trainer::parallel
