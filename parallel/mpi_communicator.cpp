// The MPI Communicator (CPU ranks) and the MPI runtime (see mpi_communicator.h).
#include "parallel/mpi_communicator.h"

#include "kernels/error.h"

#if TRAINER_MPI
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/half_convert.h"
#include "parallel/watchdog.h"

// Every MPI call goes through this: the call, file:line and MPI's own text.
#define MPI_CHECK(call)                                                           \
  do {                                                                            \
    int mpi_check_rc_ = (call);                                                   \
    if (mpi_check_rc_ != MPI_SUCCESS) {                                           \
      char mpi_check_msg_[MPI_MAX_ERROR_STRING];                                  \
      int mpi_check_len_ = 0;                                                     \
      MPI_Error_string(mpi_check_rc_, mpi_check_msg_, &mpi_check_len_);           \
      ::trainer::throw_check_failure(#call, __FILE__, __LINE__,                   \
                                     std::string(mpi_check_msg_, mpi_check_len_)); \
    }                                                                             \
  } while (0)
#endif

namespace trainer::parallel {

#if TRAINER_MPI
namespace {

std::atomic<bool> g_aborting{false};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_aborting.load()) MPI_Finalize();
}

// Element type for data movement: any dtype travels as its bit pattern.
MPI_Datatype move_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::bf16:
    case DType::f16:
    case DType::u16: return MPI_UINT16_T;
    case DType::e4m3:
    case DType::e5m2: return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

// Element type for reductions: only types MPI can add natively (bf16/fp16
// are widened to fp32 around the call; 8-bit floats are never reduced).
MPI_Datatype reduce_type(const std::string& axis, const char* op, DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::u16: return MPI_UINT16_T;
    default: break;
  }
  TRAINER_CHECK(false, "{} on axis {}: MPI cannot reduce {} (reduce in fp32)", op, axis,
                dtype_name(dtype));
  return MPI_DATATYPE_NULL;
}

int to_int(int64_t n, const std::string& axis, const char* op) {
  TRAINER_CHECK(n >= 0 && n <= INT_MAX, "{} on axis {}: count {} exceeds MPI's int range", op,
                axis, n);
  return static_cast<int>(n);
}

// avg = sum / size, done after the sum because MPI has no average.
void divide(Tensor t, int size) {
  if (t.dtype == DType::f32) {
    float* p = static_cast<float*>(t.data);
    const float inv = 1.0f / static_cast<float>(size);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] *= inv;
  } else if (t.dtype == DType::f64) {
    double* p = static_cast<double*>(t.data);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] /= size;
  }
}

template <class T>
void accumulate_typed(T* dst, const T* src, int64_t n, ReduceOp op) {
  if (op == ReduceOp::max) {
    for (int64_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
  }
}

// dst op= src for the dtypes reduce_type() accepts.
void accumulate(DType dtype, void* dst, const void* src, int64_t n, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      return accumulate_typed(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
    case DType::f64:
      return accumulate_typed(static_cast<double*>(dst), static_cast<const double*>(src), n, op);
    case DType::i32:
      return accumulate_typed(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, op);
    case DType::u16:
      return accumulate_typed(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n,
                              op);
    default: TRAINER_CHECK(false, "no reduction for {}", dtype_name(dtype));
  }
}

bool is_half(DType d) { return d == DType::bf16 || d == DType::f16; }

// bf16/fp16 tensors (mixed-precision activations and their gradients) are
// reduced in fp32 on CPU ranks: widened exactly, reduced, rounded once.
std::vector<float> widen(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  cpu::to_f32(t.dtype, t.data, out.data(), t.numel());
  return out;
}

void narrow(const std::vector<float>& v, Tensor t) {
  cpu::from_f32(t.dtype, v.data(), t.data, t.numel());
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::string name, MPI_Comm comm, int rank, int size)
      : Communicator(std::move(name), rank, size), comm_(comm) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  MPI_Comm comm() const { return comm_; }

  void all_reduce(Tensor buf, ReduceOp op) override {
    check_buffer(*this, "all_reduce", buf);
    if (is_half(buf.dtype)) {
      std::vector<float> wide = widen(buf);
      all_reduce(Tensor(wide.data(), {buf.numel()}, DType::f32, Device::cpu), op);
      narrow(wide, buf);
      return;
    }
    check_avg(op, buf.dtype, "all_reduce");
    const MPI_Datatype type = reduce_type(name(), "all_reduce", buf.dtype);
    CollectiveGuard guard(watchdog(), name().c_str(), "all_reduce", rank(), size());
    // Chunks keep each call within MPI's int count.
    const int64_t chunk = INT_MAX / 2;
    char* base = static_cast<char*>(buf.data);
    for (int64_t off = 0; off < buf.numel(); off += chunk) {
      const int n = static_cast<int>(std::min(chunk, buf.numel() - off));
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, base + off * dtype_size(buf.dtype), n, type,
                              mpi_op(op), comm_));
    }
    if (op == ReduceOp::avg) divide(buf, size());
  }

  void reduce_scatter(Tensor send, Tensor recv, ReduceOp op) override {
    check_buffer(*this, "reduce_scatter", send);
    check_buffer(*this, "reduce_scatter", recv);
    if (is_half(send.dtype) && send.dtype == recv.dtype) {
      std::vector<float> wide_send = widen(send), wide_recv(static_cast<size_t>(recv.numel()));
      reduce_scatter(Tensor(wide_send.data(), {send.numel()}, DType::f32, Device::cpu),
                     Tensor(wide_recv.data(), {recv.numel()}, DType::f32, Device::cpu), op);
      narrow(wide_recv, recv);
      return;
    }
    check_count(*this, "reduce_scatter", send, recv.numel() * size(), "send");
    check_avg(op, send.dtype, "reduce_scatter");
    TRAINER_CHECK(send.dtype == recv.dtype, "reduce_scatter on axis {}: dtypes differ", name());
    const MPI_Datatype type = reduce_type(name(), "reduce_scatter", send.dtype);
    const int n = to_int(recv.numel(), name(), "reduce_scatter");
    const size_t block_bytes = recv.nbytes();
    char* own_block = static_cast<char*>(send.data) + rank() * block_bytes;
    CollectiveGuard guard(watchdog(), name().c_str(), "reduce_scatter", rank(), size());
    // Pairwise exchange: at step k every rank sends peer rank+k its block and
    // adds the block of rank-k into its own, so each rank reduces only its
    // shard. (Open MPI 4.1's MPI_Reduce_scatter_block reduces the whole buffer
    // on one rank and scatters: about 2x slower for ZeRO-2's gradient arena.)
    if (recv.data != own_block) std::memcpy(recv.data, own_block, block_bytes);
    const int64_t chunk = std::min<int64_t>(n, kReduceChunk);
    std::vector<char> incoming(static_cast<size_t>(chunk) * dtype_size(send.dtype));
    const size_t elem = dtype_size(send.dtype);
    for (int k = 1; k < size(); ++k) {
      const int to = (rank() + k) % size();
      const int from = (rank() - k + size()) % size();
      const char* outgoing = static_cast<const char*>(send.data) + to * block_bytes;
      for (int64_t off = 0; off < n; off += chunk) {
        const int len = static_cast<int>(std::min<int64_t>(chunk, n - off));
        MPI_CHECK(MPI_Sendrecv(outgoing + off * elem, len, type, to, kReduceTag, incoming.data(),
                               len, type, from, kReduceTag, comm_, MPI_STATUS_IGNORE));
        accumulate(recv.dtype, static_cast<char*>(recv.data) + off * elem, incoming.data(), len,
                   op);
      }
    }
    if (op == ReduceOp::avg) divide(recv, size());
  }

  void all_gather(Tensor send, Tensor recv) override {
    check_buffer(*this, "all_gather", send);
    check_buffer(*this, "all_gather", recv);
    check_count(*this, "all_gather", recv, send.numel() * size(), "recv");
    TRAINER_CHECK(send.dtype == recv.dtype, "all_gather on axis {}: dtypes differ", name());
    const MPI_Datatype type = move_type(send.dtype);
    const int n = to_int(send.numel(), name(), "all_gather");
    const bool in_place = send.data == static_cast<char*>(recv.data) + rank() * send.nbytes();
    CollectiveGuard guard(watchdog(), name().c_str(), "all_gather", rank(), size());
    MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send.data, n, type, recv.data, n, type,
                            comm_));
  }

  void broadcast(Tensor buf, int root) override {
    check_buffer(*this, "broadcast", buf);
    check_peer("broadcast", root);
    CollectiveGuard guard(watchdog(), name().c_str(), "broadcast", rank(), size());
    const int64_t chunk = INT_MAX / 2;
    char* base = static_cast<char*>(buf.data);
    for (int64_t off = 0; off < buf.numel(); off += chunk) {
      const int n = static_cast<int>(std::min(chunk, buf.numel() - off));
      MPI_CHECK(MPI_Bcast(base + off * dtype_size(buf.dtype), n, move_type(buf.dtype), root,
                          comm_));
    }
  }

  void send(Tensor buf, int peer) override { send_recv(buf, peer, Tensor(), -1); }
  void recv(Tensor buf, int peer) override { send_recv(Tensor(), -1, buf, peer); }

  void send_recv(Tensor s, int send_peer, Tensor r, int recv_peer) override {
    const char* op = s.empty() ? "recv" : r.empty() ? "send" : "send_recv";
    CollectiveGuard guard(watchdog(), name().c_str(), op, rank(), size());
    MPI_Request requests[2];
    int count = 0;
    if (!r.empty()) {
      check_buffer(*this, op, r);
      check_peer(op, recv_peer);
      MPI_CHECK(MPI_Irecv(r.data, to_int(r.numel(), name(), op), move_type(r.dtype), recv_peer,
                          kTag, comm_, &requests[count++]));
    }
    if (!s.empty()) {
      check_buffer(*this, op, s);
      check_peer(op, send_peer);
      MPI_CHECK(MPI_Isend(s.data, to_int(s.numel(), name(), op), move_type(s.dtype), send_peer,
                          kTag, comm_, &requests[count++]));
    }
    MPI_CHECK(MPI_Waitall(count, requests, MPI_STATUSES_IGNORE));
  }

  void isend(Tensor buf, int peer) override {
    check_buffer(*this, "isend", buf);
    check_peer("isend", peer);
    // Staged in a copy so the caller may overwrite buf before the peer receives.
    PendingSend p;
    p.data.assign(static_cast<const char*>(buf.data), static_cast<const char*>(buf.data) + buf.nbytes());
    MPI_CHECK(MPI_Isend(p.data.data(), to_int(buf.numel(), name(), "isend"), move_type(buf.dtype),
                        peer, kTag, comm_, &p.request));
    pending_.push_back(std::move(p));
  }

  void wait_sends() override {
    if (pending_.empty()) return;
    CollectiveGuard guard(watchdog(), name().c_str(), "wait_sends", rank(), size());
    std::vector<MPI_Request> requests;
    for (PendingSend& p : pending_) requests.push_back(p.request);
    MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
    pending_.clear();
  }

  void all_to_allv(Tensor send, std::span<const int64_t> send_counts, Tensor recv,
                   std::span<const int64_t> recv_counts) override {
    check_buffer(*this, "all_to_allv", send);
    check_buffer(*this, "all_to_allv", recv);
    TRAINER_CHECK(send.dtype == recv.dtype, "all_to_allv on axis {}: dtypes differ", name());
    TRAINER_CHECK(static_cast<int>(send_counts.size()) == size() &&
                      static_cast<int>(recv_counts.size()) == size(),
                  "all_to_allv on axis {}: {} send and {} recv counts for {} ranks", name(),
                  send_counts.size(), recv_counts.size(), size());
    std::vector<int> sc(size()), sd(size()), rc(size()), rd(size());
    int64_t send_total = 0, recv_total = 0;
    for (int p = 0; p < size(); ++p) {
      TRAINER_CHECK(send_counts[p] >= 0 && recv_counts[p] >= 0,
                    "all_to_allv on axis {}: negative count", name());
      sc[p] = to_int(send_counts[p], name(), "all_to_allv");
      rc[p] = to_int(recv_counts[p], name(), "all_to_allv");
      sd[p] = to_int(send_total, name(), "all_to_allv");
      rd[p] = to_int(recv_total, name(), "all_to_allv");
      send_total += send_counts[p];
      recv_total += recv_counts[p];
    }
    check_count(*this, "all_to_allv", send, send_total, "send (sum of send_counts)");
    check_count(*this, "all_to_allv", recv, recv_total, "recv (sum of recv_counts)");
    const MPI_Datatype type = move_type(send.dtype);
    CollectiveGuard guard(watchdog(), name().c_str(), "all_to_allv", rank(), size());
    MPI_CHECK(MPI_Alltoallv(send.data, sc.data(), sd.data(), type, recv.data, rc.data(),
                            rd.data(), type, comm_));
  }

  void barrier() override {
    CollectiveGuard guard(watchdog(), name().c_str(), "barrier", rank(), size());
    MPI_CHECK(MPI_Barrier(comm_));
  }

 private:
  static constexpr int kTag = 7;
  static constexpr int kReduceTag = 8;      // never matches a user send/recv
  static constexpr int64_t kReduceChunk = 1 << 20;  // elements per exchange

  MPI_Op mpi_op(ReduceOp op) const { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }
  void check_avg(ReduceOp op, DType dtype, const char* what) const {
    TRAINER_CHECK(op != ReduceOp::avg || dtype == DType::f32 || dtype == DType::f64,
                  "{} on axis {}: avg needs a float buffer, got {}", what, name(),
                  dtype_name(dtype));
  }
  void check_peer(const char* op, int peer) const {
    TRAINER_CHECK(peer >= 0 && peer < size(), "{} on axis {}: peer {} outside a group of {}", op,
                  name(), peer, size());
  }

  MPI_Comm comm_;
  struct PendingSend {
    std::vector<char> data;  // heap storage: stays put when the vector of sends grows
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::vector<PendingSend> pending_;
};

}  // namespace

bool mpi_available() { return true; }

void mpi_init_once() {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) return;
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
  std::atexit(finalize_at_exit);
}

int mpi_world_rank() {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

int mpi_world_size() {
  int size = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  return size;
}

void mpi_abort(int code) noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  g_aborting = true;
  MPI_Abort(MPI_COMM_WORLD, code);
}

std::unique_ptr<Communicator> make_mpi_world(std::string name) {
  mpi_init_once();
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  return std::make_unique<MpiCommunicator>(std::move(name), comm, rank, size);
}

std::unique_ptr<Communicator> mpi_split(Communicator& parent, int color, int key,
                                        std::string name) {
  auto* mpi_parent = dynamic_cast<MpiCommunicator*>(&parent);
  TRAINER_CHECK(mpi_parent != nullptr, "mpi_split of axis {}: parent {} is not an MPI communicator",
                name, parent.name());
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(mpi_parent->comm(), color, key, &comm));
  MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  return std::make_unique<MpiCommunicator>(std::move(name), comm, rank, size);
}

#else  // built without MPI

namespace {
[[noreturn]] void no_mpi() {
  throw Error("this build has no MPI (install libopenmpi-dev and rebuild with -DTRAINER_MPI=ON)");
}
}  // namespace

bool mpi_available() { return false; }
void mpi_init_once() { no_mpi(); }
int mpi_world_rank() { no_mpi(); }
int mpi_world_size() { no_mpi(); }
void mpi_abort(int) noexcept {}
std::unique_ptr<Communicator> make_mpi_world(std::string) { no_mpi(); }
std::unique_ptr<Communicator> mpi_split(Communicator&, int, int, std::string) { no_mpi(); }

#endif

}  // namespace trainer::parallel
