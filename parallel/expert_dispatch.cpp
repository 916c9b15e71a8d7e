// Expert-parallel dispatch and combine over all_to_allv (see expert_dispatch.h).
#include "parallel/expert_dispatch.h"

#include <numeric>

#include "kernels/error.h"
#include "kernels/memory.h"

namespace trainer::parallel {

int64_t EpRoute::total_send() const {
  return std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0});
}
int64_t EpRoute::total_recv() const {
  return std::accumulate(recv_rows.begin(), recv_rows.end(), int64_t{0});
}

EpRoute ep_route(int ep_size, Tensor kept, Tensor recv_counts) {
  TRAINER_CHECK(ep_size >= 1 && kept.dtype == DType::i32 && recv_counts.dtype == DType::i32 &&
                    kept.numel() == recv_counts.numel() && kept.numel() % ep_size == 0,
                "ep_route: kept {} and recv_counts {} must be i32 of E elements, E divisible "
                "by ep {}",
                kept.str(), recv_counts.str(), ep_size);
  const int64_t E = kept.numel();
  std::vector<int32_t> k(E), r(E);
  copy_to_host(k.data(), kept);
  copy_to_host(r.data(), recv_counts);
  EpRoute route;
  route.ep = ep_size;
  route.local_experts = static_cast<int>(E / ep_size);
  route.send_rows.assign(ep_size, 0);
  route.recv_rows.assign(ep_size, 0);
  route.recv_expert_rows.assign(E, 0);
  for (int64_t e = 0; e < E; ++e) {
    const int peer = static_cast<int>(e / route.local_experts);
    route.send_rows[peer] += k[e];
    route.recv_rows[peer] += r[e];
    route.recv_expert_rows[e] = r[e];
  }
  return route;
}

EpRoute ep_exchange_counts(Communicator& ep, Tensor kept, Tensor recv_counts) {
  const int64_t E = kept.numel();
  TRAINER_CHECK(E % ep.size() == 0 && recv_counts.numel() == E,
                "ep_exchange_counts on axis {}: {} experts over {} ranks, recv_counts {}",
                ep.name(), E, ep.size(), recv_counts.str());
  // Each peer gets the counts of the experts it owns: one all_to_allv of El
  // integers per peer.
  std::vector<int64_t> per_peer(ep.size(), E / ep.size());
  ep.all_to_allv(kept.view({E}), per_peer, recv_counts.view({E}), per_peer);
  ep.synchronize();
  return ep_route(ep.size(), kept, recv_counts);
}

namespace {

// Rows [0, rows) of a (>= rows, C) tensor as one flat contiguous buffer.
Tensor flat_rows(const Tensor& t, int64_t rows, const char* what) {
  TRAINER_CHECK(t.ndim == 2 && t.size(0) >= rows && t.contiguous(), "ep exchange: {} {} holds "
                "fewer than {} rows", what, t.str(), rows);
  return t.slice(0, rows).view({rows * t.size(1)});
}

void exchange(Communicator& ep, const std::vector<int64_t>& send_rows,
              const std::vector<int64_t>& recv_rows, Tensor send, Tensor recv) {
  TRAINER_CHECK(static_cast<int>(send_rows.size()) == ep.size() &&
                    send.ndim == 2 && recv.ndim == 2 && send.size(1) == recv.size(1),
                "ep exchange on axis {}: route for {} ranks, send {}, recv {}", ep.name(),
                send_rows.size(), send.str(), recv.str());
  const int64_t C = send.size(1);
  std::vector<int64_t> sc(send_rows.size()), rc(recv_rows.size());
  int64_t ns = 0, nr = 0;
  for (size_t p = 0; p < send_rows.size(); ++p) {
    sc[p] = send_rows[p] * C;
    rc[p] = recv_rows[p] * C;
    ns += send_rows[p];
    nr += recv_rows[p];
  }
  ep.all_to_allv(flat_rows(send, ns, "send"), sc, flat_rows(recv, nr, "recv"), rc);
  ep.synchronize();
}

}  // namespace

void ep_dispatch(Communicator& ep, const EpRoute& route, Tensor tokens, Tensor received) {
  exchange(ep, route.send_rows, route.recv_rows, tokens, received);
}

void ep_combine(Communicator& ep, const EpRoute& route, Tensor expert_out, Tensor out) {
  exchange(ep, route.recv_rows, route.send_rows, expert_out, out);
}

}  // namespace trainer::parallel
