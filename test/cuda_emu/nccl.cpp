// The emulator's NCCL (include/nccl.h says what it is and where it differs):
// each communicator is an MPI communicator of the processes mpirun started,
// each "device" buffer host memory the emulated cudaMalloc handed out, so a
// collective is the MPI call on those bytes. The world communicator checks
// that every rank was given rank 0's unique id, so trainer's bootstrap of the
// id is tested too.
//
// Stream order (streams.cpp): a call first runs what its stream has queued (so
// it reads sendbuff as the GPU would when the stream reaches it), starts the
// exchange over MPI's non-blocking calls at once, in the order the host makes
// its calls (the same on every rank, as MPI requires of collectives), and
// queues the result's landing in recvbuff on the stream as a poll: it runs
// once the stream reaches it and every rank has joined the exchange. A reader
// on another stream that does not wait for the collective's event, or a host
// that does not synchronize, sees recvbuff as it was; a rank whose peer never
// joins is stuck at that landing, not in the call, so its stream queries
// answer cudaErrorNotReady and the watchdog finds the collective, as on GPUs.
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime.h"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;  // MPI_COMM_NULL: a world of one, no MPI needed
  int rank = 0;
  int size = 1;
};

namespace {

thread_local std::string g_last_error;

ncclResult_t fail(ncclResult_t rc, const std::string& what) {
  g_last_error = what;
  return rc;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

bool mpi_up() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// 16-bit floats: MPI has no such type, so they travel as MPI_UINT16_T and
// reduce through these (fp32 arithmetic, each partial result rounded, through
// the emulated types' own conversions).
template <class T, int Op>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    float r = x + y;
    if (Op == ncclProd) r = x * y;
    if (Op == ncclMax) r = x > y ? x : y;
    if (Op == ncclMin) r = x < y ? x : y;
    b[i] = T(r);
  }
}

template <class T>
MPI_Op op16(ncclRedOp_t op) {
  static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  static MPI_User_function* fns[4] = {reduce16<T, ncclSum>, reduce16<T, ncclProd>,
                                      reduce16<T, ncclMax>, reduce16<T, ncclMin>};
  const int i = op == ncclAvg ? 0 : static_cast<int>(op);
  if (ops[i] == MPI_OP_NULL) MPI_Op_create(fns[i], 1, &ops[i]);
  return ops[i];
}

MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat16: case ncclBfloat16: return MPI_UINT16_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

// The MPI operation of a reduction (ncclAvg: a sum of inputs scaled by 1/n first).
ncclResult_t mpi_op(ncclDataType_t t, ncclRedOp_t op, MPI_Op* out) {
  if (t == ncclFloat8e4m3 || t == ncclFloat8e5m2)
    return fail(ncclInvalidArgument, "the emulated NCCL does not reduce fp8");
  if (t == ncclFloat16) { *out = op16<__half>(op); return ncclSuccess; }
  if (t == ncclBfloat16) { *out = op16<__nv_bfloat16>(op); return ncclSuccess; }
  switch (op) {
    case ncclSum: case ncclAvg: *out = MPI_SUM; return ncclSuccess;
    case ncclProd: *out = MPI_PROD; return ncclSuccess;
    case ncclMax: *out = MPI_MAX; return ncclSuccess;
    case ncclMin: *out = MPI_MIN; return ncclSuccess;
    default: return fail(ncclInvalidArgument, "unknown reduction op");
  }
}

// NCCL's ncclAvg on floats multiplies each input by 1/n before the sum; on
// integers it divides the sum (applied by the caller after the reduction).
template <class T>
void scale16(void* p, size_t n, float s) {
  T* v = static_cast<T*>(p);
  for (size_t i = 0; i < n; ++i) v[i] = T(static_cast<float>(v[i]) * s);
}
void premultiply(void* p, size_t count, ncclDataType_t t, int nranks) {
  switch (t) {
    case ncclFloat32: {
      auto* v = static_cast<float*>(p);
      for (size_t i = 0; i < count; ++i) v[i] *= 1.0f / static_cast<float>(nranks);
      break;
    }
    case ncclFloat64: {
      auto* v = static_cast<double*>(p);
      for (size_t i = 0; i < count; ++i) v[i] *= 1.0 / nranks;
      break;
    }
    case ncclFloat16: scale16<__half>(p, count, 1.0f / static_cast<float>(nranks)); break;
    case ncclBfloat16: scale16<__nv_bfloat16>(p, count, 1.0f / static_cast<float>(nranks)); break;
    default: break;
  }
}
template <class I>
void divide(void* p, size_t count, int nranks) {
  I* v = static_cast<I*>(p);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<I>(v[i] / nranks);
}
void integer_average(void* p, size_t count, ncclDataType_t t, int nranks) {
  switch (t) {
    case ncclInt8: divide<int8_t>(p, count, nranks); break;
    case ncclUint8: divide<uint8_t>(p, count, nranks); break;
    case ncclInt32: divide<int32_t>(p, count, nranks); break;
    case ncclUint32: divide<uint32_t>(p, count, nranks); break;
    case ncclInt64: divide<int64_t>(p, count, nranks); break;
    case ncclUint64: divide<uint64_t>(p, count, nranks); break;
    default: break;
  }
}
bool is_float(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32 || t == ncclFloat64;
}

// What every call checks first: a live communicator, a known type, a stream
// this runtime made (or the default one), counts MPI can carry.
ncclResult_t check_call(const char* call, ncclComm_t comm, ncclDataType_t t, size_t count,
                        cudaStream_t stream) {
  if (!comm) return fail(ncclInvalidArgument, std::string(call) + ": null communicator");
  if (type_size(t) == 0) return fail(ncclInvalidArgument, std::string(call) + ": unknown datatype");
  if (stream && !cuda_emu::is_stream(stream))
    return fail(ncclInvalidArgument, std::string(call) + ": not a live stream");
  if (count * type_size(t) * static_cast<size_t>(comm->size) > static_cast<size_t>(INT_MAX))
    return fail(ncclInvalidArgument, std::string(call) + ": over 2 GiB, more than the emulator carries");
  return ncclSuccess;
}

void require_device(const void* p, size_t bytes, const char* what) {
  if (bytes) cuda_emu::require_device_range(p, bytes, what);
}

using Bytes = std::shared_ptr<std::vector<unsigned char>>;

// sendbuff as the stream would read it: after the stream's queued work.
Bytes read_in_order(cudaStream_t stream, const void* send, size_t bytes) {
  cuda_emu::flush_stream(stream);
  const auto* p = static_cast<const unsigned char*>(send);
  return std::make_shared<std::vector<unsigned char>>(p, p + bytes);
}

// A world of one: the collective is a copy of sendbuff into recvbuff (a sum,
// an average, a gather or a broadcast of one rank), all of it in stream
// order, reading sendbuff when the stream reaches it as a GPU does; no MPI,
// so no call order to keep.
ncclResult_t local_in_order(cudaStream_t stream, const void* send, void* recv, size_t bytes) {
  if (bytes) cuda_emu::enqueue(stream, [send, recv, bytes] { std::memmove(recv, send, bytes); });
  return ncclSuccess;
}

// MPI requests of an exchange in flight (none: nothing to wait for).
using Requests = std::shared_ptr<std::vector<MPI_Request>>;

Requests no_requests() { return std::make_shared<std::vector<MPI_Request>>(); }
Requests one_request(MPI_Request r) { return std::make_shared<std::vector<MPI_Request>>(1, r); }

// The result lands in recvbuff (out may be empty: a send) when the stream
// reaches it and `reqs` have completed; `finish` first post-processes out.
void land_in_order(cudaStream_t stream, void* recv, Bytes out, Requests reqs,
                   std::function<void()> finish = {}) {
  if (out->empty() && reqs->empty()) return;
  cuda_emu::enqueue_poll(stream, [recv, out, reqs, finish] {
    if (!reqs->empty()) {
      int done = 0;
      MPI_Testall(static_cast<int>(reqs->size()), reqs->data(), &done, MPI_STATUSES_IGNORE);
      if (!done) return false;
      reqs->clear();
    }
    if (finish) finish();
    if (!out->empty()) std::memcpy(recv, out->data(), out->size());
    return true;
  });
}

ncclResult_t mpi_rc(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return ncclSuccess;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return fail(ncclSystemError, std::string(call) + ": " + std::string(msg, len));
}

// The group in progress on this thread (NCCL's groups are per thread): its
// sends and receives start together at ncclGroupEnd, so two ranks sending to
// each other first cannot deadlock.
struct P2p {
  bool send;
  void* buf;
  size_t bytes;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
  Bytes data = nullptr;  // a send's bytes, read in stream order; a receive's, landed after
  Requests reqs = nullptr;  // its MPI request (none for a world of one)
};
thread_local int g_group_depth = 0;
thread_local std::vector<P2p> g_group;

ncclResult_t run_p2p(std::vector<P2p>& ops) {
  for (P2p& op : ops)
    op.data = op.send ? read_in_order(op.stream, op.buf, op.bytes)
                      : std::make_shared<std::vector<unsigned char>>(op.bytes);
  // A world of one sends only to itself: the n-th send of a communicator meets
  // its n-th receive.
  std::vector<P2p*> self_sends, self_recvs;
  for (P2p& op : ops)
    if (op.comm->mpi == MPI_COMM_NULL) (op.send ? self_sends : self_recvs).push_back(&op);
  for (const P2p* s : self_sends) {
    auto it = std::find_if(self_recvs.begin(), self_recvs.end(), [&](const P2p* r) {
      return r && r->comm == s->comm;
    });
    if (it == self_recvs.end() || (*it)->bytes != s->bytes)
      return fail(ncclInvalidUsage, "ncclSend to itself without a receive of the same size");
    *(*it)->data = *s->data;
    *it = nullptr;
  }
  for (const P2p* r : self_recvs)
    if (r) return fail(ncclInvalidUsage, "ncclRecv from itself without a send");
  for (int pass = 0; pass < 2; ++pass) {  // receives posted first
    for (P2p& op : ops) {
      if (op.send == (pass == 0)) continue;
      op.reqs = no_requests();
      if (op.comm->mpi == MPI_COMM_NULL) continue;  // a world of one: above
      MPI_Request req;
      const int rc = op.send ? MPI_Isend(op.data->data(), static_cast<int>(op.bytes), MPI_BYTE, op.peer,
                                         0, op.comm->mpi, &req)
                             : MPI_Irecv(op.data->data(), static_cast<int>(op.bytes), MPI_BYTE, op.peer,
                                         0, op.comm->mpi, &req);
      if (rc != MPI_SUCCESS) return mpi_rc(rc, op.send ? "ncclSend" : "ncclRecv");
      op.reqs = one_request(req);
    }
  }
  // Each op holds its stream until its peer has matched it, as NCCL's do; a
  // send's bytes live until then.
  for (P2p& op : ops) {
    if (op.send)
      land_in_order(op.stream, op.buf, std::make_shared<std::vector<unsigned char>>(), op.reqs,
                    [sent = op.data] {});
    else
      land_in_order(op.stream, op.buf, op.data, op.reqs);
  }
  return ncclSuccess;
}

ncclResult_t enqueue_p2p(const char* call, bool send, const void* buf, size_t count,
                         ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t rc = check_call(call, comm, t, count, stream); rc != ncclSuccess) return rc;
  if (peer < 0 || peer >= comm->size)
    return fail(ncclInvalidArgument, std::string(call) + ": peer out of range");
  require_device(buf, count * type_size(t), call);
  P2p op{send, const_cast<void*>(buf), count * type_size(t), peer, comm, stream};
  if (g_group_depth > 0) {
    g_group.push_back(op);
    return ncclSuccess;
  }
  std::vector<P2p> one{op};
  return run_p2p(one);
}

ncclResult_t check_config(const ncclConfig_t* cfg) {
  if (cfg && (cfg->magic != 0xcafebeef || cfg->size != sizeof(ncclConfig_t)))
    return fail(ncclInvalidArgument, "ncclConfig_t not set from NCCL_CONFIG_INITIALIZER");
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::random_device rd;
  for (char& c : id->internal) c = static_cast<char>(rd());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (ncclResult_t rc = check_config(config); rc != ncclSuccess) return rc;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRankConfig: rank out of range");
  auto c = new ncclComm{MPI_COMM_NULL, rank, nranks};
  if (nranks > 1) {
    if (!mpi_up()) {
      delete c;
      return fail(ncclSystemError,
                  "the emulated NCCL carries ranks over MPI: launch with mpirun, in a build with MPI");
    }
    int world = 0, me = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (world != nranks || me != rank) {
      delete c;
      return fail(ncclInvalidArgument, "ncclCommInitRankConfig: rank " + std::to_string(rank) +
                                           " of " + std::to_string(nranks) + " but MPI says " +
                                           std::to_string(me) + " of " + std::to_string(world));
    }
    // Every rank must hold rank 0's id: what the application's bootstrap owes NCCL.
    ncclUniqueId root = id;
    MPI_Bcast(root.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
    int same = std::memcmp(root.internal, id.internal, NCCL_UNIQUE_ID_BYTES) == 0, all = 0;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
      delete c;
      return fail(ncclInvalidArgument, "ncclCommInitRankConfig: the ranks were given different unique ids");
    }
    if (ncclResult_t rc = mpi_rc(MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi), "ncclCommInitRankConfig");
        rc != ncclSuccess) {
      delete c;
      return rc;
    }
  }
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommSplit: null communicator");
  if (ncclResult_t rc = check_config(config); rc != ncclSuccess) return rc;
  *newcomm = nullptr;
  if (comm->mpi == MPI_COMM_NULL) {
    if (color != NCCL_SPLIT_NOCOLOR) *newcomm = new ncclComm{MPI_COMM_NULL, 0, 1};
    return ncclSuccess;
  }
  MPI_Comm out = MPI_COMM_NULL;
  if (ncclResult_t rc = mpi_rc(MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color,
                                              key, &out),
                               "ncclCommSplit");
      rc != ncclSuccess)
    return rc;
  if (out == MPI_COMM_NULL) return ncclSuccess;
  auto c = new ncclComm{out, 0, 1};
  MPI_Comm_rank(out, &c->rank);
  MPI_Comm_size(out, &c->size);
  *newcomm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return comm ? ncclSuccess : fail(ncclInvalidArgument, "ncclCommFinalize: null communicator");
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (comm->mpi != MPI_COMM_NULL && mpi_up()) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

// Frees the handle without MPI: the other ranks may be stuck in a collective,
// which is why a rank aborts (the watchdog), and MPI_Comm_free would wait.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: null communicator");
  *async_error = ncclSuccess;  // an exchange in flight is the stream's to wait for, not an error
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommCount: null communicator");
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommUserRank: null communicator");
  *rank = comm->rank;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return g_last_error.c_str(); }

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t rc = check_call("ncclAllReduce", comm, t, count, stream); rc != ncclSuccess) return rc;
  const size_t bytes = count * type_size(t);
  require_device(send, bytes, "ncclAllReduce sendbuff");
  require_device(recv, bytes, "ncclAllReduce recvbuff");
  MPI_Op mop;
  if (ncclResult_t rc = mpi_op(t, op, &mop); rc != ncclSuccess) return rc;
  if (comm->mpi == MPI_COMM_NULL) return local_in_order(stream, send, recv, bytes);
  Bytes buf = read_in_order(stream, send, bytes);
  if (op == ncclAvg && is_float(t)) premultiply(buf->data(), count, t, comm->size);
  Requests reqs = no_requests();
  if (comm->mpi != MPI_COMM_NULL && count > 0) {
    MPI_Request req;
    if (ncclResult_t rc = mpi_rc(MPI_Iallreduce(MPI_IN_PLACE, buf->data(), static_cast<int>(count),
                                                mpi_type(t), mop, comm->mpi, &req),
                                 "ncclAllReduce");
        rc != ncclSuccess)
      return rc;
    reqs = one_request(req);
  }
  std::function<void()> finish;
  if (op == ncclAvg && !is_float(t))
    finish = [buf, count, t, n = comm->size] { integer_average(buf->data(), count, t, n); };
  land_in_order(stream, recv, buf, reqs, finish);
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t rc = check_call("ncclReduceScatter", comm, t, recvcount, stream); rc != ncclSuccess)
    return rc;
  const size_t bytes = recvcount * type_size(t);
  require_device(send, bytes * comm->size, "ncclReduceScatter sendbuff");
  require_device(recv, bytes, "ncclReduceScatter recvbuff");
  MPI_Op mop;
  if (ncclResult_t rc = mpi_op(t, op, &mop); rc != ncclSuccess) return rc;
  if (comm->mpi == MPI_COMM_NULL) return local_in_order(stream, send, recv, bytes);
  // A copy of the input: NCCL's in-place form has recv inside send.
  Bytes in = read_in_order(stream, send, bytes * comm->size);
  if (op == ncclAvg && is_float(t)) premultiply(in->data(), recvcount * comm->size, t, comm->size);
  auto out = std::make_shared<std::vector<unsigned char>>(bytes);
  Requests reqs = no_requests();
  if (comm->mpi == MPI_COMM_NULL || recvcount == 0) {
    std::memcpy(out->data(), in->data(), bytes);
  } else {
    MPI_Request req;
    if (ncclResult_t rc = mpi_rc(MPI_Ireduce_scatter_block(in->data(), out->data(),
                                                           static_cast<int>(recvcount), mpi_type(t),
                                                           mop, comm->mpi, &req),
                                 "ncclReduceScatter");
        rc != ncclSuccess)
      return rc;
    reqs = one_request(req);
  }
  // `in` stays alive until the exchange has completed.
  std::function<void()> finish = [in] {};
  if (op == ncclAvg && !is_float(t))
    finish = [in, out, recvcount, t, n = comm->size] { integer_average(out->data(), recvcount, t, n); };
  land_in_order(stream, recv, out, reqs, finish);
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t rc = check_call("ncclAllGather", comm, t, sendcount, stream); rc != ncclSuccess) return rc;
  const size_t bytes = sendcount * type_size(t);
  require_device(send, bytes, "ncclAllGather sendbuff");
  require_device(recv, bytes * comm->size, "ncclAllGather recvbuff");
  if (comm->mpi == MPI_COMM_NULL) return local_in_order(stream, send, recv, bytes);
  Bytes in = read_in_order(stream, send, bytes);
  if (comm->mpi == MPI_COMM_NULL || bytes == 0) {
    land_in_order(stream, recv, in, no_requests());
    return ncclSuccess;
  }
  auto out = std::make_shared<std::vector<unsigned char>>(bytes * comm->size);
  MPI_Request req;
  if (ncclResult_t rc = mpi_rc(MPI_Iallgather(in->data(), static_cast<int>(bytes), MPI_BYTE, out->data(),
                                              static_cast<int>(bytes), MPI_BYTE, comm->mpi, &req),
                               "ncclAllGather");
      rc != ncclSuccess)
    return rc;
  land_in_order(stream, recv, out, one_request(req), [in] {});  // `in` kept until then
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t rc = check_call("ncclBroadcast", comm, t, count, stream); rc != ncclSuccess) return rc;
  if (root < 0 || root >= comm->size) return fail(ncclInvalidArgument, "ncclBroadcast: root out of range");
  const size_t bytes = count * type_size(t);
  require_device(recv, bytes, "ncclBroadcast recvbuff");
  if (comm->mpi == MPI_COMM_NULL) {
    require_device(send, bytes, "ncclBroadcast sendbuff");
    return local_in_order(stream, send, recv, bytes);
  }
  Bytes buf;
  if (comm->rank == root) {
    require_device(send, bytes, "ncclBroadcast sendbuff");
    buf = read_in_order(stream, send, bytes);
  } else {
    cuda_emu::flush_stream(stream);
    buf = std::make_shared<std::vector<unsigned char>>(bytes);
  }
  Requests reqs = no_requests();
  if (comm->mpi != MPI_COMM_NULL && bytes > 0) {
    MPI_Request req;
    if (ncclResult_t rc = mpi_rc(MPI_Ibcast(buf->data(), static_cast<int>(bytes), MPI_BYTE, root,
                                            comm->mpi, &req),
                                 "ncclBroadcast");
        rc != ncclSuccess)
      return rc;
    reqs = one_request(req);
  }
  land_in_order(stream, recv, buf, reqs);
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return enqueue_p2p("ncclSend", true, send, count, t, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return enqueue_p2p("ncclRecv", false, recv, count, t, peer, comm, stream);
}

ncclResult_t ncclGroupStart() {
  ++g_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--g_group_depth > 0) return ncclSuccess;
  std::vector<P2p> ops;
  ops.swap(g_group);
  return run_p2p(ops);
}
