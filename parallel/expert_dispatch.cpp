// Expert-parallel dispatch and combine over all_to_allv (see expert_dispatch.h).
#include "parallel/expert_dispatch.h"

#include <algorithm>
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

EpRoute ep_route(int ep_size, int rank, Tensor all_counts) {
  TRAINER_CHECK(ep_size >= 1 && rank >= 0 && rank < ep_size && all_counts.dtype == DType::i32 &&
                    all_counts.numel() % (int64_t{ep_size} * ep_size) == 0,
                "ep_route: all_counts {} must be i32 (ep, E) with E divisible by ep {}",
                all_counts.str(), ep_size);
  const int64_t E = all_counts.numel() / ep_size, El = E / ep_size;
  std::vector<int32_t> c(all_counts.numel());
  copy_to_host(c.data(), all_counts);
  EpRoute route;
  route.ep = ep_size;
  route.local_experts = static_cast<int>(El);
  route.send_rows.assign(ep_size, 0);
  route.recv_rows.assign(ep_size, 0);
  route.recv_expert_rows.assign(E, 0);
  for (int64_t e = 0; e < E; ++e) route.send_rows[e / El] += c[rank * E + e];
  for (int q = 0; q < ep_size; ++q) {
    for (int64_t l = 0; l < El; ++l) {
      const int64_t n = c[q * E + rank * El + l];
      route.recv_rows[q] += n;
      route.recv_expert_rows[q * El + l] = n;
    }
  }
  for (int r = 0; r < ep_size; ++r) {
    int64_t total = 0;
    for (int q = 0; q < ep_size; ++q)
      for (int64_t l = 0; l < El; ++l) total += c[q * E + r * El + l];
    route.max_recv = std::max(route.max_recv, total);
  }
  return route;
}

EpRoute ep_exchange_counts(Communicator& ep, Tensor kept, Tensor all_counts) {
  const int64_t E = kept.numel();
  TRAINER_CHECK(E % ep.size() == 0 && all_counts.numel() == E * ep.size(),
                "ep_exchange_counts on axis {}: {} experts over {} ranks, all_counts {}",
                ep.name(), E, ep.size(), all_counts.str());
  ep.all_gather(kept.view({E}), all_counts.view({E * ep.size()}));
  ep.synchronize();
  return ep_route(ep.size(), ep.rank(), all_counts);
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
